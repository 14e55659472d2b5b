"""An agent's turn round-trips through the chat template: the assistant's tool_calls (arguments as
the JSON text OpenAI clients send back) and the tool's result render as the model wrote and reads
them, with arguments handled as vLLM does (JSON text -> value, missing or empty -> {})."""

from __future__ import annotations

import pytest

from tandem.errors import InvalidRequest
from tandem.turn.chat_request import normalize_messages
from tandem.tokenization.chat_prompt import render_chat
from tandem.tokenization.tokenizer import Tokenizer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_tool_calls_and_results_render_as_the_model_writes_and_reads_them(llama_dir):
    tok = Tokenizer.from_dir(llama_dir)
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'},
    ]
    ids = render_chat(tok, normalize_messages(messages), TOOLS)
    text = tok.decode(ids, skip_special_tokens=False)
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}\n</tool_call><|im_end|>\n') in text
    assert '<|im_start|>user\n<tool_response>\n{"sky": "clear"}\n</tool_response><|im_end|>\n' in text
    assert text.endswith("<|im_start|>assistant\n") and '"name": "get_weather"' in text


@pytest.mark.parametrize("arguments,value", [
    ('{"city": "Paris"}', {"city": "Paris"}),
    ({"city": "Paris"}, {"city": "Paris"}),
    ("", {}),
    (None, {}),
    ("[1, 2]", [1, 2]),
])
def test_arguments_as_vllm_reads_them(arguments, value):
    msg = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                "function": {"name": "f", "arguments": arguments}}]}
    [norm] = normalize_messages([msg])
    assert norm["tool_calls"][0]["function"]["arguments"] == value and norm["content"] == ""


def test_arguments_that_are_not_json_are_a_400():
    msg = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{city: Paris"}}]}
    with pytest.raises(InvalidRequest) as info:
        normalize_messages([msg])
    assert info.value.param == "messages[0].tool_calls[0].function.arguments"
