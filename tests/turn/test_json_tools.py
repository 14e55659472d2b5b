"""Forced calls as plain JSON (no tool-call parser): vLLM's schemas, `$defs` gathered at the root,
and what a random-weight model writes under the grammar at temperature 1 parses back into calls
whose arguments validate."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem_demo.schema_check import validate
from tandem.errors import InvalidRequest
from tandem.parsers import make_reasoning_parser
from tandem.turn.json_tools import json_calls_grammar, json_calls_parser, json_calls_schema
from tandem.turn.tool_request import ToolRequest
from tests.api.fakes import FakeBackend
from tests.turn.test_tool_grammar import SCHEMAS, TOOLS, sample


def test_required_is_vllms_list_and_a_named_function_its_arguments():
    schema = json_calls_schema(ToolRequest(TOOLS, "required"))
    assert schema["type"] == "array" and schema["minItems"] == 1 and "maxItems" not in schema
    first = schema["items"]["anyOf"][0]
    assert first["properties"]["name"] == {"type": "string", "enum": ["get_weather"]}
    assert first["required"] == ["name", "parameters"]
    assert json_calls_schema(ToolRequest(TOOLS, "required", parallel=False))["maxItems"] == 1
    named = json_calls_schema(ToolRequest(TOOLS, "function", "set_timer"))
    assert named == SCHEMAS["set_timer"]
    assert json_calls_parser(ToolRequest(TOOLS, "function", "set_timer")).name == "json_arguments"


def test_defs_are_gathered_at_the_root_and_must_agree():
    def tool(name, defs):
        return {"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": defs}}}
    same = {"P": {"type": "integer"}}
    schema = json_calls_schema(ToolRequest([tool("a", same), tool("b", same)], "required"))
    assert schema["$defs"] == same
    assert all("$defs" not in item["properties"]["parameters"] for item in schema["items"]["anyOf"])
    with pytest.raises(InvalidRequest) as info:
        json_calls_schema(ToolRequest([tool("a", same), tool("b", {"P": {"type": "string"}})], "required"))
    assert info.value.param == "tools"


def _calls(parser, text, tools):
    out = parser.parse(text, tools)
    assert out.content is None, text
    return out.tool_calls


def test_random_model_calls_parse_and_validate(make_engine, llama_dir):
    engine = make_engine(llama_dir, num_blocks=512)
    for parallel, seeds in ((True, range(3)), (False, range(3, 6))):
        req = ToolRequest(TOOLS, "required", parallel=parallel)
        for text in sample(engine, json_calls_grammar(req), seeds, max_tokens=400):
            calls = _calls(json_calls_parser(req), text, TOOLS)
            assert calls and (parallel or len(calls) == 1), text
            for c in calls:
                assert validate(json.loads(c.arguments), SCHEMAS[c.name]) == [], text
    req = ToolRequest(TOOLS, "function", "set_timer")
    for text in sample(engine, json_calls_grammar(req), range(6, 9)):
        [call] = _calls(json_calls_parser(req), text, req.callable_tools())
        assert call.name == "set_timer" and validate(json.loads(call.arguments), SCHEMAS["set_timer"]) == []
    # a think block may come first
    qwen3 = make_reasoning_parser("qwen3")
    grammar = json.loads(json_calls_grammar(req, qwen3).text)["format"]
    assert grammar["type"] == "sequence" and grammar["elements"][1]["type"] == "json_schema"


def test_responses_and_messages_get_the_calls_too():
    backend = FakeBackend(reply='[{"name": "get_weather", "parameters": {"city": "Paris"}}]', max_model_len=4096)
    with TestClient(build_app(backend, ServerConfig(tool_call_parser="none"))) as client:
        out = client.post("/v1/responses", json={
            "input": "weather?", "tool_choice": "required",
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]}).json()["output"]
        assert [(o["type"], o["name"], o["arguments"]) for o in out] == \
            [("function_call", "get_weather", '{"city": "Paris"}')]
        backend.reply = '{"city": "Rome"}'
        msg = client.post("/v1/messages", json={
            "model": "fake-model", "max_tokens": 100, "messages": [{"role": "user", "content": "weather?"}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "get_weather"}}).json()
        assert msg["stop_reason"] == "tool_use"
        assert [(b["type"], b["name"], b["input"]) for b in msg["content"]] == [("tool_use", "get_weather", {"city": "Rome"})]
