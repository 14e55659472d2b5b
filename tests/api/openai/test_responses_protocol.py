import json

import pytest

from tandem.api.openai.responses_protocol import parse_responses
from tandem.errors import InvalidRequest, ModelNotFound, NotSupportedYet

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": True}


def test_instructions_input_tools_and_knobs():
    req = parse_responses({"model": "m", "input": "hi", "instructions": "Be brief.", "tools": [WEATHER],
                           "tool_choice": "required", "parallel_tool_calls": False,
                           "max_output_tokens": 50, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
                           "seed": 7, "stream": True, "store": False, "metadata": {"k": "v"}}, "m")
    t = req.turn
    assert t.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert t.tools.tools == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city", "parameters": WEATHER["parameters"],
        "strict": True}}]
    assert (t.tools.choice, t.tools.parallel) == ("required", False)
    assert (t.max_tokens, t.temperature, t.top_p, t.top_k, t.seed, t.stream) == (50, 0.5, 0.9, 0, 7, True)
    assert t.params.messages == "input" and t.params.max_tokens == "max_output_tokens"
    assert not req.store and req.new_messages == [{"role": "user", "content": "hi"}]
    assert req.echo["tools"] == [WEATHER] and req.echo["tool_choice"] == "required"
    assert req.echo["metadata"] == {"k": "v"} and req.echo["parallel_tool_calls"] is False


def test_defaults_leave_sampling_to_the_model():
    t = parse_responses({"input": "hi"}, "m").turn
    assert (t.model, t.max_tokens, t.temperature, t.top_p, t.top_k) == ("m", None, None, None, None)
    assert t.tools.tools is None and t.tools.choice == "none" and t.structured is None


def test_history_goes_between_instructions_and_input():
    req = parse_responses({"input": "and now?", "instructions": "sys", "previous_response_id": "resp_1"},
                          "m")
    history = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "one"}]
    assert req.previous_response_id == "resp_1"
    assert [m["content"] for m in req.with_history(history).messages] == ["sys", "first", "one", "and now?"]


def test_named_function_choice():
    t = parse_responses({"input": "x", "tools": [WEATHER],
                         "tool_choice": {"type": "function", "name": "get_weather"}}, "m").turn
    assert (t.tools.choice, t.tools.function) == ("function", "get_weather")


def test_text_format_json_schema_becomes_a_grammar():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = parse_responses({"input": "x", "text": {"format": {"type": "json_schema", "name": "out",
                                                             "schema": schema, "strict": True}}}, "m")
    assert req.turn.structured.kind == "json_schema"
    assert json.loads(req.turn.structured.text) == schema
    assert req.echo["text"]["format"]["name"] == "out"
    assert parse_responses({"input": "x", "text": {"format": {"type": "json_object"}}},
                           "m").turn.structured.kind == "json_object"
    assert parse_responses({"input": "x", "text": {"format": {"type": "text"}}}, "m").turn.structured is None


def test_unknown_model_is_404():
    with pytest.raises(ModelNotFound):
        parse_responses({"model": "other", "input": "x"}, "m")


@pytest.mark.parametrize("body, param", [
    ({}, "input"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": 3}, "temperature"),
    ({"input": "x", "top_p": 0}, "top_p"),
    ({"input": "x", "tools": "no"}, "tools"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0]"),
    ({"input": "x", "tools": [{"type": "function", "name": "a b"}]}, "tools[0].name"),
    ({"input": "x", "tools": [dict(WEATHER, parameters=[])]}, "tools[0].parameters"),
    ({"input": "x", "tools": [WEATHER, WEATHER]}, "tools[1].name"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"input": "x", "metadata": [1]}, "metadata"),
    ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format"),
    ({"input": "x", "store": "yes"}, "store"),
])
def test_bad_fields_are_400_naming_the_param(body, param):
    with pytest.raises(InvalidRequest) as e:
        parse_responses(body, "m")
    assert e.value.param == param, e.value.message
    assert e.value.status == 400


@pytest.mark.parametrize("body, param", [
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "truncation": "auto"}, "truncation"),
    ({"input": "x", "top_logprobs": 2}, "top_logprobs"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "mode": "auto",
                                                         "tools": []}}, "tool_choice"),
])
def test_unsupported_fields_are_refused(body, param):
    with pytest.raises(NotSupportedYet) as e:
        parse_responses(body, "m")
    assert e.value.param == param
