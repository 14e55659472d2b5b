"""Tool calls, reasoning and structured outputs through the OpenAI chat route (scripted backend):
message.tool_calls and finish_reason "tool_calls", streamed deltas that reassemble to the same
calls with no markup, n > 1, the grammar each request carries, and 400s naming the parameter."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.errors import InvalidRequest
from tests.api.fakes import FakeBackend
from tests.api.sse import events

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
         {"type": "function", "function": {"name": "get_time"}}]
ASK = [{"role": "user", "content": "weather?"}]


class CompilingBackend(FakeBackend):
    """Refuses a grammar whose text holds "nonsense", as a worker's compiler does (before the
    first delta, param structured_outputs)."""

    async def generate(self, req, info=None):
        g = req.sampling.grammar
        if g is not None and "nonsense" in g.text:
            raise InvalidRequest("the json_schema constraint does not compile", param="structured_outputs")
        async for d in super().generate(req, info):
            yield d


def make_client(reply: str, **config) -> tuple[TestClient, FakeBackend]:
    backend = CompilingBackend(reply=reply, max_model_len=4096)
    return TestClient(build_app(backend, ServerConfig(**config))), backend


@pytest.fixture
def hermes():
    client, backend = make_client("Checking." + CALL, tool_call_parser="hermes")
    with client:
        yield client, backend


def chat(client, **body):
    return client.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 500, **body})


def reassemble(chunks: list[dict], n: int) -> list[dict]:
    """Per choice: content, and calls rebuilt from their deltas as a client does."""
    out = [{"content": "", "calls": {}, "finish": None} for _ in range(n)]
    for ch in chunks:
        for c in ch["choices"]:
            o, delta = out[c["index"]], c["delta"]
            o["content"] += delta.get("content") or ""
            for tc in delta.get("tool_calls", []):
                call = o["calls"].setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                if "id" in tc:
                    assert call["id"] is None and tc["type"] == "function"
                    assert tc["function"]["arguments"] == ""   # the first delta: name only
                    call.update(id=tc["id"], name=tc["function"]["name"])
                call["arguments"] += tc["function"].get("arguments", "")
            o["finish"] = c["finish_reason"] or o["finish"]
    return out


def test_a_call_comes_back_parsed_with_its_text_before_it(hermes):
    client, backend = hermes
    body = chat(client, tools=TOOLS).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] == "Checking." and "reasoning_content" not in msg
    [call] = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}
    req = backend.seen[-1]
    assert req.sampling.grammar.kind == "structural_tag"      # auto: an opened call is held to the tools
    assert req.context.parser.tool_call_parser == "hermes"


def test_streamed_deltas_reassemble_to_the_collected_calls_for_each_choice(hermes):
    client, _ = hermes
    collected = chat(client, tools=TOOLS, n=2, temperature=0).json()["choices"]
    r = chat(client, tools=TOOLS, n=2, temperature=0, stream=True)
    chunks = [e for e in events(r.text) if e != "[DONE]"]
    assert all("<tool_call>" not in (c["delta"].get("content") or "") for ch in chunks for c in ch["choices"])
    streamed = reassemble(chunks, 2)
    for s, c in zip(streamed, collected):
        assert s["finish"] == c["finish_reason"] == "tool_calls"
        assert s["content"] == c["message"]["content"] == "Checking."
        assert [(x["name"], x["arguments"]) for x in s["calls"].values()] == \
            [(x["function"]["name"], x["function"]["arguments"]) for x in c["message"]["tool_calls"]]
    assert streamed[0]["calls"][0]["id"] != streamed[1]["calls"][0]["id"]


def test_only_calls_means_null_content_and_forced_choices_carry_a_grammar(hermes):
    client, backend = hermes
    backend.reply = CALL
    msg = chat(client, tools=TOOLS, tool_choice="required").json()["choices"][0]["message"]
    assert msg["content"] is None and len(msg["tool_calls"]) == 1
    assert json.loads(backend.seen[-1].sampling.grammar.text)["format"]["at_least_one"] is True
    chat(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert "get_time" in backend.seen[-1].sampling.grammar.text
    assert "get_weather" not in backend.seen[-1].sampling.grammar.text


def test_no_tools_or_tool_choice_none_leave_the_text_alone_under_the_guard(hermes):
    client, backend = hermes
    for extra in ({}, {"tools": TOOLS, "tool_choice": "none"}):
        choice = chat(client, **extra).json()["choices"][0]
        assert choice["message"]["content"] == "Checking." + CALL and choice["finish_reason"] == "stop"
        assert "tool_calls" not in choice["message"]
        # the engine keeps the opening out (a scripted backend does not: the text stays text)
        guard = json.loads(backend.seen[-1].sampling.grammar.text)["format"]
        assert guard == {"type": "any_text", "excludes": ["<tool_call>"]}
    client, backend = make_client("x", tool_call_parser="hermes", tool_call_guard=False)
    with client:
        chat(client)
        assert backend.seen[-1].sampling.grammar is None


def test_parallel_tool_calls_false_returns_one_call(hermes):
    client, backend = hermes
    backend.reply = CALL + "\n" + CALL.replace("Paris", "Rome")
    calls = chat(client, tools=TOOLS, parallel_tool_calls=False).json()["choices"][0]["message"]["tool_calls"]
    assert len(calls) == 1 and "Paris" in calls[0]["function"]["arguments"]
    assert json.loads(backend.seen[-1].sampling.grammar.text)["format"]["stop_after_first"] is True


def test_logprobs_still_come_with_parsed_deltas(hermes):
    client, _ = hermes
    r = chat(client, tools=TOOLS, logprobs=True, stream=True, max_tokens=500)
    chunks = [e for e in events(r.text) if e != "[DONE]"]
    n_lp = sum(len((c["logprobs"] or {}).get("content") or []) for ch in chunks for c in ch["choices"])
    assert n_lp == len(("Checking." + CALL).encode())    # one per token, none lost


def test_reasoning_goes_to_reasoning_content():
    client, _ = make_client("<think>It is sunny.</think>\n\nSunny!", reasoning_parser="qwen3")
    with client:
        msg = chat(client).json()["choices"][0]["message"]
        assert msg["reasoning_content"] == "It is sunny." and msg["content"] == "Sunny!"
        chunks = [e for e in events(chat(client, stream=True).text) if e != "[DONE]"]
        deltas = [c["delta"] for ch in chunks for c in ch["choices"]]
        assert "".join(d.get("reasoning_content", "") for d in deltas) == "It is sunny."
        assert "".join(d.get("content") or "" for d in deltas) == "Sunny!"


def test_structured_outputs_reach_the_engine_and_compile_errors_name_the_field(hermes):
    client, backend = hermes
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}}
    assert chat(client, response_format=rf).status_code == 200
    assert backend.seen[-1].sampling.grammar.kind == "json_schema"
    client.post("/v1/completions", json={"prompt": "x", "guided_regex": "[ab]+"})
    assert backend.seen[-1].sampling.grammar.text == "[ab]+"
    bad_rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "nonsense"}}}
    for stream in (False, True):
        r = chat(client, response_format=bad_rf, stream=stream)
        assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"
    r = chat(client, guided_json={"type": "nonsense"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "guided_json"


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "x y"}}]}, "tools[0].function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
     "response_format"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
])
def test_bad_tool_requests_are_400_naming_the_parameter(hermes, body, param):
    client, _ = hermes
    r = chat(client, **body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error"


def test_forcing_a_call_without_a_tool_call_parser_is_plain_json_parsed_back():
    """As vLLM: "required" is a JSON list of {name, parameters}, a named function its arguments."""
    listed = '[{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}, {"name": "get_time", "parameters": {}}]'
    client, backend = make_client(listed, tool_call_parser="none")
    with client:
        for stream in (False, True):
            r = chat(client, tools=TOOLS, tool_choice="required", stream=stream)
            assert r.status_code == 200, r.text
            if stream:
                [got] = reassemble([e for e in events(r.text) if e != "[DONE]"], 1)
                content, finish = got["content"], got["finish"]
                calls = [(c["name"], c["arguments"]) for _, c in sorted(got["calls"].items())]
            else:
                choice = r.json()["choices"][0]
                content, finish = choice["message"]["content"] or "", choice["finish_reason"]
                calls = [(c["function"]["name"], c["function"]["arguments"])
                         for c in choice["message"]["tool_calls"]]
            assert content == "" and finish == "tool_calls"
            assert calls == [("get_weather", '{"city": "Paris", "days": 2}'), ("get_time", "{}")]
        schema = json.loads(backend.seen[-1].sampling.grammar.text)["format"]["json_schema"]
        assert schema["minItems"] == 1 and len(schema["items"]["anyOf"]) == 2
        backend.reply = '{"city": "Rome"}'
        msg = chat(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}
                   ).json()["choices"][0]["message"]
        [call] = msg["tool_calls"]
        assert msg["content"] is None and call["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}
        # "auto" without a parser stays text, as before
        assert chat(client, tools=TOOLS).json()["choices"][0]["message"]["content"] == '{"city": "Rome"}'
