"""POST /v1/messages and /v1/messages/count_tokens over a scripted backend (tests/api/fakes.py)."""

import json

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tests.api.fakes import ByteTokenizer, FakeBackend

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
KEY = {"x-api-key": "k1", "anthropic-version": "2023-06-01"}


class HermesTokenizer(ByteTokenizer):
    chat_template = "{{ '<tool_call>' }}"


@pytest.fixture
def backend():
    return FakeBackend(reply="Sure." + CALL, tokenizer=HermesTokenizer())


@pytest.fixture
def client(backend):
    with TestClient(build_app(backend, ServerConfig(api_keys=("k1",)))) as c:
        yield c


def body(**extra) -> dict:
    return {"model": "fake-model", "max_tokens": 200, "messages": [{"role": "user", "content": "hi"}], **extra}


def sse_events(text: str) -> list[dict]:
    out = []
    for block in text.split("\n\n"):
        if block:
            kind, data = block.split("\n")
            event = json.loads(data.removeprefix("data: "))
            assert kind == "event: " + event["type"]
            out.append(event)
    return out


def test_tool_use_message(client, backend):
    r = client.post("/v1/messages", headers=KEY, json=body(tools=TOOLS, system="SYS"))
    assert r.status_code == 200, r.text
    msg = r.json()
    assert msg["id"].startswith("msg_") and msg["type"] == "message" and msg["role"] == "assistant"
    assert msg["content"][0] == {"type": "text", "text": "Sure."}
    use = msg["content"][1]
    assert use["type"] == "tool_use" and use["id"].startswith("toolu_")
    assert (use["name"], use["input"]) == ("get_weather", {"city": "Paris"})
    assert msg["stop_reason"] == "tool_use" and msg["stop_sequence"] is None
    prompt = len(backend.seen[0].prompt_token_ids)
    assert msg["usage"] == {"input_tokens": prompt, "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0, "output_tokens": len(backend.reply)}
    assert "system: SYS" in backend.tokenizer.decode(backend.seen[0].prompt_token_ids)


def test_tool_result_round_trip_and_cache_reads(client, backend):
    first = client.post("/v1/messages", headers=KEY, json=body(tools=TOOLS)).json()
    backend.reply = "Sunny."
    turn2 = body(tools=TOOLS, messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": first["content"][1]["id"],
                                      "content": "sunny"}]}])
    r = client.post("/v1/messages", headers=KEY, json=turn2)
    assert r.status_code == 200 and r.json()["content"] == [{"type": "text", "text": "Sunny."}]
    assert r.json()["stop_reason"] == "end_turn"
    assert "tool: sunny" in backend.tokenizer.decode(backend.seen[-1].prompt_token_ids)
    again = client.post("/v1/messages", headers={**KEY, "x-session-affinity": "s1"}, json=turn2).json()
    usage = again["usage"]
    assert usage["cache_read_input_tokens"] > 0
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == len(backend.seen[-1].prompt_token_ids)
    assert backend.seen[-1].context.session_id == "s1"


def test_stream_reassembles_to_the_message(client, backend):
    collected = client.post("/v1/messages", headers=KEY, json=body(tools=TOOLS)).json()
    r = client.post("/v1/messages", headers=KEY, json=body(tools=TOOLS, stream=True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert [e["type"] for e in events[:2]] == ["message_start", "ping"]
    assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta"
                   and e["delta"]["type"] == "text_delta")
    args = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"
                   and e["delta"]["type"] == "input_json_delta")
    assert text == collected["content"][0]["text"]
    assert json.loads(args) == collected["content"][1]["input"]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-2]["usage"]["output_tokens"] == collected["usage"]["output_tokens"]


def test_stop_sequence(client, backend):
    backend.reply = "one two three"
    msg = client.post("/v1/messages", headers=KEY, json=body(stop_sequences=["nope", "two"])).json()
    assert msg["content"][0]["text"].startswith("one ")
    assert (msg["stop_reason"], msg["stop_sequence"]) == ("stop_sequence", "two")
    msg = client.post("/v1/messages", headers=KEY, json=body(max_tokens=3)).json()
    assert (msg["stop_reason"], msg["stop_sequence"]) == ("max_tokens", None)


def test_forced_tool_sends_the_tool_grammar(client, backend):
    r = client.post("/v1/messages", headers=KEY,
                    json=body(tools=TOOLS, tool_choice={"type": "tool", "name": "get_weather"}))
    assert r.status_code == 200
    grammar = backend.seen[0].sampling.grammar
    assert grammar.kind == "structural_tag" and "get_weather" in grammar.text


def test_count_tokens(client, backend):
    b = body(tools=TOOLS)
    del b["max_tokens"]
    r = client.post("/v1/messages/count_tokens", headers=KEY, json=b)
    assert r.status_code == 200
    client.post("/v1/messages", headers=KEY, json=body(tools=TOOLS))
    assert r.json() == {"input_tokens": len(backend.seen[0].prompt_token_ids)}


def test_auth_takes_x_api_key_or_bearer(client):
    r = client.post("/v1/messages", json=body())
    assert r.status_code == 401
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"
    assert client.post("/v1/messages", headers={"x-api-key": "wrong"}, json=body()).status_code == 401
    assert client.post("/v1/messages", headers={"authorization": "Bearer k1"}, json=body()).status_code == 200
    assert client.post("/v1/messages", headers={"x-api-key": "k1"}, json=body()).status_code == 200


def test_errors_are_anthropic_shaped(client, backend):
    r = client.post("/v1/messages", headers=KEY, json=body(max_tokens=None))
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": "'max_tokens' is required"}}
    r = client.post("/v1/messages", headers=KEY, content=b"[1]")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/v1/messages", headers=KEY, json=body(messages=[{"role": "user", "content": "x" * 300}]))
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("prompt is too long")
    r = client.post("/v1/messages", headers=KEY, json=body(model="claude-opus"))
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = client.post("/v1/messages/batches", headers=KEY, json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_a_failure_mid_stream_is_an_error_event(client, backend):
    backend.fail_after = 3
    r = client.post("/v1/messages", headers=KEY, json=body(stream=True))
    events = sse_events(r.text)
    assert events[0]["type"] == "message_start"
    assert events[-1] == {"type": "error", "error": {"type": "api_error",
                                                     "message": events[-1]["error"]["message"]}}
    assert backend.running == set()


def test_reasoning_parser_makes_a_thinking_block():
    backend = FakeBackend(reply="<think>\nweigh it\n</think>\n\nThe answer.", tokenizer=HermesTokenizer())
    with TestClient(build_app(backend, ServerConfig(reasoning_parser="qwen3"))) as c:
        msg = c.post("/v1/messages", json=body()).json()
        assert msg["content"] == [{"type": "thinking", "thinking": "weigh it", "signature": ""},
                                  {"type": "text", "text": "The answer."}]
        events = sse_events(c.post("/v1/messages", json=body(stream=True)).text)
        thinking = "".join(e["delta"]["thinking"] for e in events if e["type"] == "content_block_delta"
                           and e["delta"]["type"] == "thinking_delta")
        assert thinking == "weigh it"
