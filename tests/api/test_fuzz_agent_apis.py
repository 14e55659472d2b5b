"""Random bodies for /v1/responses and /v1/messages over a scripted backend: every answer is a 200
or a 4xx in the API's own error shape (never a 500), and streams end with their final event.
Derandomized, so every run sees the same examples."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tests.api.fakes import ByteTokenizer, FakeBackend

FUZZ = settings(derandomize=True, deadline=None, max_examples=150,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

any_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """`valid` 19 times in 20, anything at all otherwise."""
    return st.integers(0, 19).flatmap(lambda i: any_json if i == 0 else valid)


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
ITEM = st.one_of(
    st.fixed_dictionaries({"role": mostly(st.sampled_from(["user", "system", "developer", "assistant"])),
                           "content": mostly(st.text(max_size=10) | st.just([{"type": "input_text", "text": "a"}]))}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": mostly(st.just("c1")),
                           "name": mostly(st.just("f")), "arguments": mostly(st.just('{"city": "x"}'))}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": mostly(st.just("c1")),
                           "output": mostly(st.text(max_size=5))}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": st.just([]),
                           "content": mostly(st.just([{"type": "reasoning_text", "text": "r"}]))}))
RESPONSES = st.fixed_dictionaries({
    "input": mostly(st.text(max_size=10) | st.lists(ITEM, min_size=1, max_size=4))}, optional={
    "instructions": mostly(st.text(max_size=5)),
    "tools": mostly(st.just([{"type": "function", "name": "f", "parameters": SCHEMA}])),
    "tool_choice": mostly(st.sampled_from(["auto", "none", "required", {"type": "function", "name": "f"}])),
    "parallel_tool_calls": mostly(st.booleans()),
    "max_output_tokens": mostly(st.integers(-1, 20)),
    "temperature": mostly(st.floats(-1, 3)),
    "top_p": mostly(st.floats(-0.5, 1.5)),
    "stream": mostly(st.booleans()),
    "store": mostly(st.booleans()),
    "previous_response_id": mostly(st.just("resp_unknown")),
    "text": mostly(st.just({"format": {"type": "json_object"}})),
    "metadata": mostly(st.just({"a": "b"})),
})
BLOCK = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": mostly(st.text(max_size=5))}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": mostly(st.just("t1")), "name": mostly(st.just("f")),
                           "input": mostly(st.just({"city": "x"}))}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": mostly(st.just("t1")),
                           "content": mostly(st.text(max_size=5))}))
MESSAGE = st.fixed_dictionaries({"role": mostly(st.sampled_from(["user", "assistant"])),
                                 "content": mostly(st.text(max_size=10) | st.lists(BLOCK, min_size=1, max_size=3))})
MESSAGES = st.fixed_dictionaries({
    "messages": mostly(st.lists(MESSAGE, min_size=1, max_size=3)),
    "max_tokens": mostly(st.integers(0, 20))}, optional={
    "system": mostly(st.text(max_size=5) | st.just([{"type": "text", "text": "s"}])),
    "tools": mostly(st.just([{"name": "f", "input_schema": SCHEMA}])),
    "tool_choice": mostly(st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "f"},
                                           {"type": "none"}])),
    "temperature": mostly(st.floats(-1, 2)),
    "top_k": mostly(st.integers(-2, 5)),
    "stop_sequences": mostly(st.lists(st.text(min_size=1, max_size=3), max_size=2)),
    "stream": mostly(st.booleans()),
})


class HermesTokenizer(ByteTokenizer):
    chat_template = "{{ '<tool_call>' }}"


@pytest.fixture(scope="module")
def client():
    backend = FakeBackend(reply='Hi<tool_call>\n{"name": "f", "arguments": {"city": "x"}}\n</tool_call>',
                          tokenizer=HermesTokenizer(), max_model_len=512)
    with TestClient(build_app(backend, ServerConfig())) as c:
        yield c


def _last_event(text: str) -> dict:
    block = [b for b in text.split("\n\n") if b][-1]
    return json.loads(block.split("\n")[1].removeprefix("data: "))


@FUZZ
@given(body=RESPONSES)
def test_responses_never_500(client, body):
    r = client.post("/v1/responses", content=json.dumps(body))   # NaN/inf too
    assert r.status_code == 200 or 400 <= r.status_code < 500, r.text
    if r.status_code != 200:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    elif body.get("stream") is True:
        assert _last_event(r.text)["type"] in ("response.completed", "response.incomplete")
    else:
        assert r.json()["status"] in ("completed", "incomplete")


@FUZZ
@given(body=MESSAGES)
def test_messages_never_500(client, body):
    r = client.post("/v1/messages", content=json.dumps(body))
    assert r.status_code == 200 or 400 <= r.status_code < 500, r.text
    if r.status_code != 200:
        assert r.json()["type"] == "error" and set(r.json()["error"]) == {"type", "message"}
    elif body.get("stream") is True:
        assert _last_event(r.text)["type"] == "message_stop"
    else:
        assert r.json()["stop_reason"] in ("end_turn", "max_tokens", "tool_use", "stop_sequence")
