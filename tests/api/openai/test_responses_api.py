"""POST/GET/DELETE /v1/responses over a scripted backend (tests/api/fakes.py)."""

import json

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tests.api.fakes import ByteTokenizer, FakeBackend

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"type": "function", "name": "get_weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


class HermesTokenizer(ByteTokenizer):
    chat_template = "{{ '<tool_call>' }}"     # detected as the hermes tool-call format


@pytest.fixture
def backend():
    return FakeBackend(reply="Sure." + CALL, tokenizer=HermesTokenizer())


@pytest.fixture
def client(backend):
    with TestClient(build_app(backend, ServerConfig())) as c:
        yield c


def sse_events(text: str) -> list[dict]:
    out = []
    for block in text.split("\n\n"):
        if block:
            kind, data = block.split("\n")
            event = json.loads(data.removeprefix("data: "))
            assert kind == "event: " + event["type"]
            out.append(event)
    return out


def prompt_text(backend, i=-1) -> str:
    return backend.tokenizer.decode(backend.seen[i].prompt_token_ids)


def test_text_input_answers_a_message(client, backend):
    backend.reply = "Hello world"
    r = client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 50})
    assert r.status_code == 200 and r.headers["x-tandem-decode"] == "w1"
    body = r.json()
    assert body["id"].startswith("resp_") and body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "Hello world"
    prompt = len(backend.seen[0].prompt_token_ids)
    assert body["usage"] == {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                             "output_tokens": 11, "output_tokens_details": {"reasoning_tokens": 0},
                             "total_tokens": prompt + 11}
    assert backend.seen[0].sampling.max_tokens == 50
    # no tools: the hermes opening is kept out (turn/tool_guard.py)
    assert "any_text" in backend.seen[0].sampling.grammar.text


def test_cached_tokens_and_session_reach_the_engine(client, backend):
    body = {"input": "hi", "cache_salt": "s1"}
    client.post("/v1/responses", json=body)
    r = client.post("/v1/responses", json=body, headers={"x-session-affinity": "sess-9"})
    assert r.json()["usage"]["input_tokens_details"]["cached_tokens"] > 0
    ctx = backend.seen[-1].context
    assert (ctx.session_id, ctx.cache_salt) == ("sess-9", "s1")
    assert ctx.parser.tool_call_parser is None      # no tools offered: nothing to parse


def test_function_call_round_trip_with_previous_response_id(client, backend):
    r = client.post("/v1/responses", json={"input": "weather?", "tools": TOOLS, "instructions": "SYS"})
    first = r.json()
    assert [o["type"] for o in first["output"]] == ["message", "function_call"]
    call = first["output"][1]
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Paris"})
    assert call["call_id"].startswith("call_") and call["id"].startswith("fc_")
    assert backend.seen[0].context.parser.tool_call_parser == "hermes"
    backend.reply = "It is sunny."
    r = client.post("/v1/responses", json={
        "previous_response_id": first["id"], "tools": TOOLS,
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21C"}]})
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "It is sunny."
    assert r.json()["previous_response_id"] == first["id"]
    prompt = prompt_text(backend)
    assert "user: weather?" in prompt and "assistant: Sure." in prompt and "tool: sunny, 21C" in prompt
    assert "SYS" not in prompt                       # instructions are not carried over


def test_store_false_is_not_kept(client):
    r = client.post("/v1/responses", json={"input": "hi", "store": False})
    rid = r.json()["id"]
    assert r.json()["store"] is False
    r = client.post("/v1/responses", json={"input": "again", "previous_response_id": rid})
    assert r.status_code == 404
    assert r.json()["error"]["param"] == "previous_response_id"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert client.get(f"/v1/responses/{rid}").status_code == 404


def test_retrieve_and_delete(client):
    body = client.post("/v1/responses", json={"input": "hi"}).json()
    got = client.get(f"/v1/responses/{body['id']}")
    assert got.status_code == 200 and got.json() == body
    r = client.delete(f"/v1/responses/{body['id']}")
    assert r.json() == {"id": body["id"], "object": "response", "deleted": True}
    assert client.get(f"/v1/responses/{body['id']}").status_code == 404
    assert client.delete(f"/v1/responses/{body['id']}").status_code == 404


def test_stream_reassembles_to_the_collected_response(client, backend):
    collected = client.post("/v1/responses", json={"input": "w", "tools": TOOLS}).json()
    r = client.post("/v1/responses", json={"input": "w", "tools": TOOLS, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    final = events[-1]["response"]
    assert text == final["output"][0]["content"][0]["text"] == collected["output"][0]["content"][0]["text"]
    assert args == final["output"][1]["arguments"] == collected["output"][1]["arguments"]
    assert client.get(f"/v1/responses/{final['id']}").json() == final   # streamed ones are stored too


def test_named_tool_choice_sends_the_tool_grammar(client, backend):
    r = client.post("/v1/responses", json={"input": "w", "tools": TOOLS,
                                           "tool_choice": {"type": "function", "name": "get_weather"}})
    assert r.status_code == 200
    grammar = backend.seen[0].sampling.grammar
    assert grammar is not None and grammar.kind == "structural_tag" and "get_weather" in grammar.text
    assert r.json()["tool_choice"] == {"type": "function", "name": "get_weather"}


def test_errors_are_openai_shaped(client, backend):
    r = client.post("/v1/responses", json={"input": [{"role": "user", "content": 3}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].content"
    r = client.post("/v1/responses", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/v1/responses", json={"input": "x" * 300})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    assert r.json()["error"]["code"] == "context_length_exceeded"
    r = client.post("/v1/responses", json={"input": "x", "tools": TOOLS, "tool_choice": "required",
                                           "text": {"format": {"type": "json_object"}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "text.format"
    assert client.get("/v1/responses/resp_nope").status_code == 404


HOSTED = [{"type": "web_search"}, {"type": "web_search_preview"},
          {"type": "file_search", "vector_store_ids": ["vs_1"]},
          {"type": "code_interpreter", "container": {"type": "auto"}},
          {"type": "computer_use_preview", "display_width": 800, "display_height": 600,
           "environment": "browser"},
          {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp",
           "require_approval": "never"},
          {"type": "image_generation"}, {"type": "local_shell"},
          {"type": "custom", "name": "grep"}]


@pytest.mark.parametrize("tool", HOSTED, ids=[t["type"] for t in HOSTED])
def test_hosted_tools_are_a_400_naming_the_tool_type_with_the_official_client(client, backend, tool):
    import openai

    oa = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client,
                       max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        oa.responses.create(model="fake-model", input="find it", tools=[TOOLS[0], tool])
    err = caught.value
    assert err.status_code == 400 and err.param == "tools[1].type" and err.code == "not_supported"
    assert err.type == "invalid_request_error"
    assert repr(tool["type"]) in err.message and "function tools" in err.message
    hosted = "hosted tool" in err.message
    assert hosted == (tool["type"] != "custom")
    assert backend.seen == []                  # refused before anything ran


def test_a_failure_mid_stream_ends_with_response_failed(client, backend):
    backend.fail_after = 3
    r = client.post("/v1/responses", json={"input": "hi", "stream": True})
    events = sse_events(r.text)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["status"] == "failed"
    assert backend.running == set()


def test_reasoning_parser_splits_a_reasoning_item():
    backend = FakeBackend(reply="<think>\nweigh it\n</think>\n\nThe answer.", tokenizer=HermesTokenizer())
    with TestClient(build_app(backend, ServerConfig(reasoning_parser="qwen3"))) as c:
        body = c.post("/v1/responses", json={"input": "q"}).json()
        assert [o["type"] for o in body["output"]] == ["reasoning", "message"]
        assert body["output"][0]["content"] == [{"type": "reasoning_text", "text": "weigh it"}]
        assert body["output"][1]["content"][0]["text"] == "The answer."
        assert body["usage"]["output_tokens_details"]["reasoning_tokens"] > 0
        events = sse_events(c.post("/v1/responses", json={"input": "q", "stream": True}).text)
        reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
        assert reasoning == "weigh it"
        assert backend.seen[-1].context.parser.reasoning_parser == "qwen3"
