import json

import pytest

from tandem.api.openai.openai_protocol import ParseContext
from tandem.api.workers_ai.workers_ai_api import model_matches, parse_workers_ai
from tandem.errors import TandemError
from tests.api.fakes import ByteTokenizer
from tests.api.sse import events

URL = "/client/v4/accounts/acc123/ai/run/@cf/meta/fake-model"
CTX = ParseContext("fake-model", ByteTokenizer(), 256)


def test_model_matching():
    assert model_matches("@cf/meta/fake-model", "fake-model")
    assert model_matches("fake-model", "fake-model")
    assert model_matches("@cf/meta/Fake-Model", "org/fake-model")
    assert not model_matches("@cf/meta/other", "fake-model")


def test_parse_defaults_and_raw_prompt():
    p = parse_workers_ai({"prompt": "hi"}, "@cf/a/fake-model", CTX)
    tok = ByteTokenizer()
    templated = tok.encode(tok.apply_chat_template([{"role": "user", "content": "hi"}]),
                           add_special_tokens=False)
    assert p.prompts == (tuple(templated),)
    assert p.sampling.max_tokens == 256 and p.sampling.temperature == 0.6
    raw = parse_workers_ai({"prompt": "hi", "raw": True, "max_tokens": 3, "top_k": 5, "seed": 4},
                           "fake-model", CTX)
    assert raw.prompts == (tuple(tok.encode("hi")),)
    assert (raw.sampling.max_tokens, raw.sampling.top_k, raw.sampling.seed) == (3, 5, 4)


@pytest.mark.parametrize("body,param", [
    ({}, "prompt"),
    ({"prompt": "a", "messages": [{"role": "user", "content": "a"}]}, "messages"),
    ({"prompt": "a", "temperature": "x"}, "temperature"),
    ({"prompt": "a", "lora": "my-adapter"}, "lora"),
    ({"prompt": "a", "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"prompt": "a", "response_format": {"type": "xml"}}, "response_format.type"),
    ({"prompt": "a", "tools": [{"name": "bad name"}]}, "tools[0].function.name"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
])
def test_parse_errors(body, param):
    with pytest.raises(TandemError) as info:
        parse_workers_ai(body, "fake-model", CTX)
    assert info.value.status == 400 and info.value.param == param


def test_run_non_streaming(client):
    r = client.post(URL, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    assert r.status_code == 200 and r.headers["x-tandem-decode"] == "w1"
    body = r.json()
    assert body["success"] is True and body["errors"] == [] and body["messages"] == []
    assert body["result"]["response"] == "Hello"
    usage = body["result"]["usage"]
    assert usage["completion_tokens"] == 5 and usage["total_tokens"] == usage["prompt_tokens"] + 5
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}


def test_run_streaming(client):
    r = client.post(URL, json={"prompt": "hi", "stream": True, "max_tokens": 3})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    ev = events(r.text)
    assert ev[-1] == "[DONE]"
    assert [e["response"] for e in ev[:-1]] == ["H", "e", "l", ""]
    assert ev[-2]["usage"]["completion_tokens"] == 3


def test_errors_use_the_envelope(client):
    r = client.post("/client/v4/accounts/a/ai/run/@cf/meta/other-model", json={"prompt": "x"})
    assert r.status_code == 404
    body = r.json()
    assert body["success"] is False and body["result"] is None and body["messages"] == []
    assert body["errors"][0]["code"] == 5007 and "other-model" in body["errors"][0]["message"]
    r = client.post(URL, json={"prompt": "x", "top_p": 7})
    assert r.status_code == 400 and "top_p" in r.json()["errors"][0]["message"]
    r = client.post(URL, content=b"{bad")
    assert r.status_code == 400 and r.json()["success"] is False
    r = client.post(URL + "?queueRequest=true", json={"requests": []})
    assert r.status_code == 400 and "not supported yet" in r.json()["errors"][0]["message"]
    r = client.post(URL, json={"prompt": "x" * 300})   # over the context: 400 in its envelope
    assert r.status_code == 400 and r.json()["success"] is False
    assert r.json()["errors"][0]["code"] == 5021 and "maximum context length" in r.json()["errors"][0]["message"]


def test_usage_is_counted_when_the_backend_reports_no_counts(client, backend):
    backend.report_counts = False
    body = {"prompt": "hi", "max_tokens": 3}
    usage = client.post(URL, json=body).json()["result"]["usage"]
    n_prompt = len(backend.seen[0].prompt_token_ids)
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (n_prompt, 3)
    ev = events(client.post(URL, json={**body, "stream": True}).text)
    assert ev[-2]["usage"]["completion_tokens"] == 3
    chat = client.post("/v1/chat/completions", json={"model": "fake-model", "max_tokens": 3,
                                                     "messages": [{"role": "user", "content": "hi"}]})
    assert chat.json()["usage"]["prompt_tokens"] == n_prompt
    assert chat.json()["usage"]["completion_tokens"] == 3


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WAI_TOOLS = [{"name": "get_weather", "description": "weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


@pytest.fixture
def hermes_client(backend):
    from starlette.testclient import TestClient

    from tandem.api.app import build_app
    from tandem.api.config import ServerConfig
    backend.reply = "Checking." + CALL
    with TestClient(build_app(backend, ServerConfig(tool_call_parser="hermes"))) as c:
        yield c


def test_tools_in_workers_ai_shape_come_back_as_tool_calls(hermes_client, backend):
    body = {"messages": [{"role": "user", "content": "weather?"}], "tools": WAI_TOOLS,
            "max_tokens": 200}
    result = hermes_client.post(URL, json=body).json()["result"]
    assert result["response"] == "Checking."
    assert result["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    seen = backend.seen[-1]
    assert seen.sampling.grammar is not None and seen.sampling.grammar.kind == "structural_tag"
    assert seen.context.parser.tool_call_parser == "hermes"
    ev = events(hermes_client.post(URL, json={**body, "stream": True}).text)
    assert "".join(e["response"] for e in ev[:-1]) == "Checking."
    assert ev[-2]["tool_calls"] == result["tool_calls"] and "usage" in ev[-2]
    assert all("<tool_call>" not in e["response"] for e in ev[:-1])


def test_without_tools_the_markup_is_plain_text_and_json_mode_is_a_grammar(hermes_client, backend):
    result = hermes_client.post(URL, json={"prompt": "hi", "max_tokens": 200}).json()["result"]
    assert result["response"] == "Checking." + CALL and "tool_calls" not in result
    # the engine would keep the opening out (the tool-call guard); a scripted reply stays text
    assert json.loads(backend.seen[-1].sampling.grammar.text)["format"]["excludes"] == ["<tool_call>"]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    hermes_client.post(URL, json={"prompt": "hi", "response_format": {"type": "json_schema",
                                                                      "json_schema": schema}})
    assert backend.seen[-1].sampling.grammar.kind == "json_schema"
    assert backend.seen[-1].sampling.grammar.text == '{"type": "object", "properties": {"a": {"type": "integer"}}}'
