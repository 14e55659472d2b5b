from tests.api.sse import events

MSG = [{"role": "user", "content": "hi"}]


def chat(client, **kw):
    return client.post("/v1/chat/completions", json={"model": "fake-model", "messages": MSG, **kw})


def test_chat_non_streaming(client, backend):
    r = chat(client, max_tokens=5)
    assert r.status_code == 200
    assert r.headers["x-tandem-prefill"] == "w1" and r.headers["x-tandem-decode"] == "w1"
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["system_fingerprint"].startswith("fp_")
    (choice,) = body["choices"]
    assert choice["message"]["content"] == "Hello" and choice["finish_reason"] == "length"
    assert choice["logprobs"] is None
    n_prompt = len(backend.seen[0].prompt_token_ids)
    assert body["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 5,
                             "total_tokens": n_prompt + 5,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    # the same prompt again hits the (fake) prefix cache
    assert chat(client, max_tokens=5).json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_chat_streaming_with_usage(client):
    r = chat(client, stream=True, stream_options={"include_usage": True}, stop=" ")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-tandem-prefill"] == "w1"
    ev = events(r.text)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Hello"  # stopped at " ", stop string not included
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6


def test_completions_list_of_prompts_and_n(client, backend):
    r = client.post("/v1/completions", json={"model": "fake-model", "prompt": ["a", "b"], "n": 2,
                                             "max_tokens": 3, "temperature": 0.5, "seed": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert len(backend.seen) == 4
    texts = [c["text"] for c in body["choices"]]
    assert texts[0] != texts[1] and texts[0] == texts[2]  # seeds 1, 2, 1, 2 (fake shifts by seed)
    assert body["usage"]["prompt_tokens"] == 4 and body["usage"]["completion_tokens"] == 12


def test_completions_stream_n2(client):
    r = client.post("/v1/completions", json={"model": "fake-model", "prompt": "a", "n": 2,
                                             "max_tokens": 2, "stream": True})
    ev = events(r.text)
    assert ev[-1] == "[DONE]"
    by_choice = {0: "", 1: ""}
    for e in ev[:-1]:
        (c,) = e["choices"]
        by_choice[c["index"]] += c["text"]
    assert by_choice == {0: "He", 1: "He"}


def test_logprobs_chat(client):
    body = chat(client, max_tokens=2, logprobs=True, top_logprobs=2).json()
    content = body["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == ["H", "e"]
    assert content[0]["logprob"] == -9999.0  # -inf from the engine
    assert [t["token"] for t in content[1]["top_logprobs"]] == ["e", "x"]


def test_errors_have_openai_shape_and_status(client):
    cases = [
        (client.post("/v1/chat/completions", content=b"{nope"), 400, None),
        (client.post("/v1/chat/completions", content=b"[1]"), 400, None),
        (client.post("/v1/chat/completions", json={"model": "x", "messages": MSG}), 404, "model"),
        (chat(client, temperature="hot"), 400, "temperature"),
        (chat(client, messages=[{"role": "user", "content": "x" * 300}]), 400, "messages"),
        (client.post("/v1/completions", json={"model": "fake-model", "prompt": "x" * 5000}), 413, None),
        (client.post("/v1/completions", json={"model": "fake-model", "prompt": "a",
                                              "prompt_logprobs": 21}), 400, "prompt_logprobs"),
    ]
    for r, status, param in cases:
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
        assert err["param"] == param


def test_a_prompt_over_the_context_is_a_400_context_length_exceeded(client):
    """As OpenAI and vLLM (LangChain's context-overflow handling reads the status and code)."""
    for path, body, param, what in [
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 300}]}, "messages",
             "input messages"),
            ("/v1/completions", {"prompt": "x" * 300}, "prompt", "prompt")]:
        r = client.post(path, json={"model": "fake-model", **body})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "context_length_exceeded", param)
        assert err["message"] == ("This model's maximum context length is 256 tokens. However, your request has "
                                  f"{301 if param == 'prompt' else 321} input tokens. Please reduce the length "
                                  f"of the {what}.")


def test_engine_side_too_long_is_400_even_when_streaming(client, backend):
    backend.kv_capacity = 10  # the parser lets it through; the backend raises PromptTooLong
    for stream in (False, True):
        r = client.post("/v1/completions", json={"model": "fake-model", "prompt": [5] * 30,
                                                 "stream": stream})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert backend.running == set()


def test_backend_failure_mid_stream_is_reported_in_band(client, backend):
    backend.fail_after = 2
    r = chat(client, stream=True)
    assert r.status_code == 200
    ev = events(r.text)
    assert ev[-1] == "[DONE]" and ev[-2]["error"]["type"] == "server_error"
    assert "Traceback" not in r.text and "exploded" not in r.text
    r = chat(client)
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"


def test_body_too_large_is_413(client):
    r = chat(client, messages=[{"role": "user", "content": "x" * 5000}])
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_models(client):
    body = client.get("/v1/models").json()
    assert body["object"] == "list" and body["data"][0]["id"] == "fake-model"
    one = client.get("/v1/models/fake-model").json()
    assert one["id"] == "fake-model" and one["object"] == "model"
    missing = client.get("/v1/models/org/other")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


def test_one_bad_prompt_in_a_list_fails_the_request_and_aborts_the_others(client, backend):
    backend.kv_capacity = 10
    backend.token_delay = 0.01
    r = client.post("/v1/completions", json={"model": "fake-model", "prompt": [[5] * 3, [5] * 30],
                                             "n": 2, "stream": True})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert backend.running == set()
    started = [q.request_id for q in backend.seen if len(q.prompt_token_ids) == 3]
    assert started and set(started) <= set(backend.aborted)


def test_large_body_is_parsed_off_the_event_loop():
    from starlette.testclient import TestClient

    from tandem.api.app import build_app
    from tandem.api.config import ServerConfig
    from tandem.api.request_body import OFF_LOOP_BYTES
    from tests.api.fakes import FakeBackend

    backend = FakeBackend(max_model_len=10**6)
    with TestClient(build_app(backend, ServerConfig())) as c:
        content = "y" * OFF_LOOP_BYTES
        r = c.post("/v1/chat/completions", json={"model": "fake-model", "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == len(backend.seen[0].prompt_token_ids) > OFF_LOOP_BYTES
