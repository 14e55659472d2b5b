import json

import pytest

from tandem.api.anthropic.messages_protocol import parse_messages
from tandem.errors import InvalidRequest, ModelNotFound, NotSupportedYet

WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def body(**extra) -> dict:
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_system_messages_and_knobs():
    req = parse_messages(body(system=[{"type": "text", "text": "a"}, {"type": "text", "text": "b",
                                                                      "cache_control": {"type": "ephemeral"}}],
                              temperature=0.2, top_p=0.9, top_k=5, stop_sequences=["END"], stream=True,
                              metadata={"user_id": "u"}, thinking={"type": "disabled"}), "m")
    t = req.turn
    assert t.messages == [{"role": "system", "content": "a\nb"}, {"role": "user", "content": "hi"}]
    assert (t.max_tokens, t.temperature, t.top_p, t.top_k, t.stop, t.stream) == \
        (64, 0.2, 0.9, 5, ("END",), True)
    assert req.stop_sequences == ("END",) and t.tools.tools is None


def test_tool_use_and_tool_result_blocks_become_chat_calls_and_tool_messages():
    req = parse_messages(body(tools=[WEATHER], messages=[
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "call it", "signature": "sig"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
            {"type": "text", "text": "and tomorrow?"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "down", "is_error": True}]},
    ]), "m")
    assert req.turn.messages == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "call it",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny", "name": "get_weather"},
        {"role": "user", "content": "and tomorrow?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: down", "name": "get_weather"},
    ]
    tools = req.turn.tools
    assert tools.tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"], "description": "Weather of a city"}}]
    assert tools.choice == "auto"


@pytest.mark.parametrize("choice, expect", [
    ({"type": "auto"}, ("auto", None, True)),
    ({"type": "any"}, ("required", None, True)),
    ({"type": "any", "disable_parallel_tool_use": True}, ("required", None, False)),
    ({"type": "tool", "name": "get_weather"}, ("function", "get_weather", True)),
    ({"type": "none"}, ("none", None, True)),
])
def test_tool_choice(choice, expect):
    t = parse_messages(body(tools=[WEATHER], tool_choice=choice), "m").turn.tools
    assert (t.choice, t.function, t.parallel) == expect


def test_count_only_needs_no_max_tokens():
    b = body()
    del b["max_tokens"]
    assert parse_messages(b, "m", count_only=True).turn.max_tokens is None
    with pytest.raises(InvalidRequest) as e:
        parse_messages(b, "m")
    assert e.value.param == "max_tokens"


def test_unknown_model_is_404():
    with pytest.raises(ModelNotFound):
        parse_messages(body(model="claude-x"), "m")


@pytest.mark.parametrize("extra, param", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                                  "input": {}}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     "messages[0].content[0].id"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                                       "input": []}]}]}, "messages[0].content[0].input"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"system": 5}, "system"),
    ({"system": [{"type": "image"}]}, "system[0]"),
    ({"temperature": 1.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"stop_sequences": [1]}, "stop_sequences"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"tools": [{"name": "a b", "input_schema": {}}]}, "tools[0].name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].name"),
    ({"tools": [WEATHER], "tool_choice": "auto"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
])
def test_bad_fields_are_400_naming_the_param(extra, param):
    with pytest.raises(InvalidRequest) as e:
        parse_messages(body(**extra), "m")
    assert e.value.param == param, e.value.message
    assert e.value.status == 400


@pytest.mark.parametrize("extra, param", [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0]"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"mcp_servers": [{"url": "x"}]}, "mcp_servers"),
])
def test_unsupported_fields_are_refused(extra, param):
    with pytest.raises(NotSupportedYet) as e:
        parse_messages(body(**extra), "m")
    assert e.value.param == param


def test_tool_input_keeps_non_ascii():
    req = parse_messages(body(messages=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"c": "Zürich"}}]},
    ]), "m")
    assert json.loads(req.turn.messages[1]["tool_calls"][0]["function"]["arguments"]) == {"c": "Zürich"}
    assert "Zürich" in req.turn.messages[1]["tool_calls"][0]["function"]["arguments"]


def test_output_config_format_becomes_a_json_schema_grammar():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = parse_messages(body(output_config={"effort": "low", "format": {"type": "json_schema",
                                                                         "schema": schema}}), "m")
    assert req.turn.structured.kind == "json_schema" and json.loads(req.turn.structured.text) == schema
    assert parse_messages(body(output_config={"effort": "high"}), "m").turn.structured is None
    with pytest.raises(InvalidRequest) as e:
        parse_messages(body(output_config={"format": {"type": "json_schema"}}), "m")
    assert e.value.param == "output_config.format"
