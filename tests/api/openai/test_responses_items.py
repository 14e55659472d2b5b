import pytest

from tandem.api.openai.responses_items import input_messages, items_to_messages
from tandem.errors import InvalidRequest, NotSupportedYet


def test_text_input_is_one_user_message():
    assert input_messages("Hello") == [{"role": "user", "content": "Hello"}]


def test_messages_with_parts_roles_and_easy_shape():
    msgs = input_messages([
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                        {"type": "input_text", "text": "b"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
    ])
    assert msgs == [{"role": "developer", "content": "Be brief."},
                    {"role": "user", "content": "a\nb"},
                    {"role": "assistant", "content": "ok"}]


def test_function_calls_join_the_assistant_turn_and_outputs_become_tool_messages():
    msgs = input_messages([
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "two calls"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "rain"}]},
    ])
    assert msgs[1] == {"role": "assistant", "content": "Checking.", "reasoning_content": "two calls",
                       "tool_calls": [
                           {"id": "c1", "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
                           {"id": "c2", "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]}
    assert msgs[2:] == [{"role": "tool", "tool_call_id": "c1", "content": "sunny", "name": "weather"},
                        {"role": "tool", "tool_call_id": "c2", "content": "rain", "name": "weather"}]


def test_a_call_with_no_text_before_opens_an_assistant_turn():
    msgs = items_to_messages([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}],
                             "output")
    assert msgs == [{"role": "assistant", "content": "",
                     "tool_calls": [{"id": "c", "type": "function",
                                     "function": {"name": "f", "arguments": "{}"}}]}]


def test_an_unknown_call_output_has_no_name():
    [msg] = input_messages([{"type": "function_call_output", "call_id": "zz", "output": "x"}])
    assert msg == {"role": "tool", "tool_call_id": "zz", "content": "x"}


@pytest.mark.parametrize("raw, param", [
    ([], "input"),
    (5, "input"),
    ([3], "input[0]"),
    ([{"role": "tool", "content": "x"}], "input[0].role"),
    ([{"role": "user", "content": 5}], "input[0].content"),
    ([{"role": "user", "content": [{"type": "input_text"}]}], "input[0].content[0].text"),
    ([{"role": "user", "content": [{"type": "bogus", "text": "x"}]}], "input[0].content[0]"),
    ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
    ([{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}], "input[0].arguments"),
    ([{"type": "function_call_output", "call_id": "c", "output": 3}], "input[0].output"),
    ([{"content": "no type or role"}], "input[0]"),
])
def test_bad_items_name_their_place(raw, param):
    with pytest.raises(InvalidRequest) as e:
        input_messages(raw)
    assert e.value.param == param


@pytest.mark.parametrize("item, param", [
    ({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}, "input[0].content[0]"),
    ({"type": "item_reference", "id": "msg_1"}, "input[0].type"),
    ({"type": "web_search_call", "id": "ws_1"}, "input[0].type"),
])
def test_unsupported_items_are_refused(item, param):
    with pytest.raises(NotSupportedYet) as e:
        input_messages([item])
    assert e.value.param == param and e.value.status == 400
