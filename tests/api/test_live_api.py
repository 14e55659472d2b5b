"""The OpenAI client and raw HTTP against a live `tandem serve` (real engine, tiny random model)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from tandem.testing.server_process import stop, wait_healthy
from tandem.testing.tiny_model import write_test_model
from tests.api.sse import events

REPO = Path(__file__).resolve().parents[2]
NAME = "tiny"
MAX_LEN = 256
BLOCK = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The `tandem serve` process and its URL."""
    model = write_test_model(tmp_path_factory.mktemp("model") / "tiny-llama")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "serve", "--model", str(model), "--port", str(port),
         "--threads", "1", "--device", "cpu", "--num-kv-blocks", "64", "--block-size", str(BLOCK),
         "--max-model-len", str(MAX_LEN), "--served-model-name", NAME, "--log-level", "warning",
         "--grammar-compile-timeout", "300"],   # a compile stopped early was stopped by its client
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120, describe=lambda: proc.stdout.read().decode() if proc.poll() is not None else "")
        yield url, proc
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def server(served) -> str:
    return served[0]


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


def ask(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Question {i}: what is the capital of France?"}]


def greedy_chat(client, messages, **kw):
    return client.chat.completions.create(model=NAME, messages=messages, temperature=0, **kw)


def test_chat_non_streaming(client):
    r = greedy_chat(client, ask(1), max_tokens=8)
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion" and r.model == NAME
    assert r.system_fingerprint.startswith("fp_")
    (c,) = r.choices
    assert c.message.role == "assistant" and isinstance(c.message.content, str)
    assert c.finish_reason in ("stop", "length")
    u = r.usage
    assert 0 < u.completion_tokens <= 8 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens == 0


def test_stream_equals_non_stream_and_reports_usage(client):
    full = greedy_chat(client, ask(2), max_tokens=12, extra_body={"ignore_eos": True})
    chunks = list(greedy_chat(client, ask(2), max_tokens=12, stream=True,
                              stream_options={"include_usage": True},
                              extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_continuous_usage_stats_count_tokens_chunk_by_chunk(client):
    chunks = list(client.completions.create(
        model=NAME, prompt="Once upon a time", max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "stream_options": {"include_usage": True,
                                                           "continuous_usage_stats": True}}))
    counts = [ch.usage.completion_tokens for ch in chunks]
    assert counts == sorted(counts) and counts[-1] == 10 and chunks[-1].choices == []
    assert all(ch.usage.total_tokens == ch.usage.prompt_tokens + ch.usage.completion_tokens for ch in chunks)
    plain = list(client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=10,
                                           temperature=0, stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True}))
    assert all(ch.usage is None for ch in plain[:-1]) and plain[-1].usage.completion_tokens == 10


def test_repeated_prompt_reports_cached_tokens(client, server):
    long = [{"role": "user", "content": "Tell me a story about " + "dragons and castles " * 12}]
    first = greedy_chat(client, long, max_tokens=2)
    second = greedy_chat(client, long, max_tokens=2)
    assert first.usage.prompt_tokens > 2 * BLOCK
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= BLOCK and cached % BLOCK == 0 and cached < second.usage.prompt_tokens
    metrics = httpx.get(server + "/metrics").text
    hits = [line for line in metrics.splitlines() if line.startswith("tandem:prefix_cache_hits_total")]
    assert hits and float(hits[0].rsplit(" ", 1)[1]) >= cached


def test_stop_string_cuts_the_text(client):
    base = greedy_chat(client, ask(3), max_tokens=24, extra_body={"ignore_eos": True})
    text = base.choices[0].message.content
    k = next((k for k in range(1, len(text) - 1)
              if text[k:k + 2].isascii() and text[k:k + 2].isalpha() and text.find(text[k:k + 2]) == k),
             None)
    assert k is not None, f"no usable stop string in {text!r}"
    r = greedy_chat(client, ask(3), max_tokens=24, stop=[text[k:k + 2], "@@never@@"],
                    extra_body={"ignore_eos": True})
    assert r.choices[0].message.content == text[:k] and r.choices[0].finish_reason == "stop"


def test_seed_reproducible_and_choices_differ(client):
    def sample(seed, n=1):
        return client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=12,
                                         temperature=1.0, seed=seed, n=n,
                                         extra_body={"ignore_eos": True})
    a, b = sample(123), sample(123)
    assert a.choices[0].text == b.choices[0].text
    many = sample(7, n=3)
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert len({c.text for c in many.choices}) > 1
    assert many.usage.completion_tokens == 36


def test_completions_prompt_list_and_stream(client):
    r = client.completions.create(model=NAME, prompt=["Hello", "The sky is"], max_tokens=4,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1] and r.usage.completion_tokens == 8
    parts = {0: "", 1: ""}
    for ch in client.completions.create(model=NAME, prompt=["Hello", "The sky is"], max_tokens=4,
                                        temperature=0, stream=True, extra_body={"ignore_eos": True}):
        for c in ch.choices:
            parts[c.index] += c.text
    assert parts == {0: r.choices[0].text, 1: r.choices[1].text}


def test_logprobs(client):
    r = greedy_chat(client, ask(4), max_tokens=5, logprobs=True, top_logprobs=3,
                    extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for e in content:
        tops = [t.logprob for t in e.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert e.logprob == pytest.approx(tops[0], abs=1e-4)  # greedy takes the best token
        assert e.bytes is not None and e.logprob <= 0
    c = client.completions.create(model=NAME, prompt="Hello", max_tokens=4, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True}).choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0


def test_logit_bias_steers_greedy_tokens(client):
    def tokens(**kw):
        r = client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=6,
                                      temperature=0, logprobs=0, extra_body={"ignore_eos": True}, **kw)
        assert r.usage.completion_tokens == 6
        return r.choices[0].logprobs.tokens

    plain, forced_a, forced_b = tokens(), tokens(logit_bias={"42": 100}), tokens(logit_bias={"43": 100})
    assert len(set(forced_a)) == 1 and len(set(forced_b)) == 1 and forced_a != forced_b
    assert len(set(plain)) > 1   # the random model does not repeat one token by itself


def test_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        greedy_chat(client, ask(5), max_tokens=0)
    assert e.value.status_code == 400 and e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=NAME, messages=ask(5), temperature=9)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=ask(5))
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:   # as OpenAI and vLLM: LangChain reads this
        client.completions.create(model=NAME, prompt=list(range(1, MAX_LEN + 10)), max_tokens=2)
    assert e.value.status_code == 400 and e.value.body["code"] == "context_length_exceeded"
    assert e.value.body["param"] == "prompt" and f"maximum context length is {MAX_LEN} tokens" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=NAME, messages=ask(5), response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}})
    assert e.value.body["param"] == "response_format"
    r = client.chat.completions.create(model=NAME, messages=ask(5), max_tokens=64, seed=3,
                                       response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":   # a random model may not close the object in 64 tokens
        assert isinstance(json.loads(r.choices[0].message.content), dict)


def _descendants(pid: int) -> set[int]:
    """The processes below `pid` (Linux: read from /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue   # gone meanwhile
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_structured_output_bounds(client, served):
    """Issue #30: an empty choice and one of more options than the limit are 400s naming the
    field; a compile whose client left is killed (the server's timeout is 300 s here), and
    requests go on being served."""
    url, proc = served
    for choices, says in (([], "non-empty"), ([str(i) for i in range(1001)], "--max-grammar-choices")):
        with pytest.raises(openai.BadRequestError) as e:
            greedy_chat(client, ask(8), max_tokens=2, extra_body={"guided_choice": choices})
        assert e.value.body["param"] == "guided_choice" and says in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        greedy_chat(client, ask(8), max_tokens=2, extra_body={"guided_grammar": "root ::= root"})
    assert e.value.body["param"] == "guided_grammar" and "admits no output" in e.value.message
    helpers = _descendants(proc.pid)   # the compile helper (it compiled the grammars above)
    slow = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}
    body = {"model": NAME, "messages": ask(8), "max_tokens": 4, "guided_json": slow}
    left = []

    def leave_while_compiling():
        try:
            httpx.post(url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(60, read=10))
        except httpx.ReadTimeout:
            left.append(True)

    client_thread = threading.Thread(target=leave_while_compiling)
    client_thread.start()
    deadline = time.monotonic() + 10
    while not _descendants(proc.pid) - helpers:   # the compile's child
        assert time.monotonic() < deadline, "no compile started"
        time.sleep(0.05)
    client_thread.join()
    assert left, "the compile ended before its client left"
    deadline = time.monotonic() + 60
    while _descendants(proc.pid) - helpers:   # killed with its request
        assert time.monotonic() < deadline, "the compile went on after its client left"
        time.sleep(0.1)
    r = greedy_chat(client, ask(9), max_tokens=8, extra_body={"guided_choice": ["yes", "no"]})
    assert r.choices[0].message.content in ("yes", "no")


def test_workers_ai(server):
    url = server + f"/client/v4/accounts/acc/ai/run/@cf/tandem/{NAME}"
    body = {"messages": ask(6), "max_tokens": 6, "temperature": 0}
    r = httpx.post(url, json=body, timeout=60)
    assert r.status_code == 200
    res = r.json()
    assert res["success"] is True and res["result"]["usage"]["completion_tokens"] <= 6
    s = httpx.post(url, json={**body, "stream": True}, timeout=60)
    ev = events(s.text)
    assert ev[-1] == "[DONE]" and "usage" in ev[-2]
    assert "".join(e["response"] for e in ev[:-1]) == res["result"]["response"]
    bad = httpx.post(server + "/client/v4/accounts/acc/ai/run/@cf/x/other", json=body)
    assert bad.status_code == 404 and bad.json()["success"] is False


def test_disconnect_mid_stream_frees_blocks(server):
    body = {"model": NAME, "messages": ask(7), "max_tokens": 200, "stream": True,
            "ignore_eos": True}
    before = httpx.get(server + "/internal/stats").json()["generation_tokens"]
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", server + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()  # kept open: closing this iterator would close the stream
            for _ in range(6):      # three events
                next(lines)
            busy = http.get(server + "/internal/stats").json()
            assert busy["num_running"] == 1 and busy["num_blocks_free"] < busy["num_blocks_total"], busy
    deadline = time.monotonic() + 10
    while True:
        stats = httpx.get(server + "/internal/stats").json()
        if stats["num_running"] == 0 and stats["num_waiting"] == 0 \
                and stats["num_blocks_free"] == stats["num_blocks_total"]:
            break
        assert time.monotonic() < deadline, f"blocks not freed after a disconnect: {stats}"
        time.sleep(0.05)
    assert stats["generation_tokens"] - before < 200  # aborted, not run to max_tokens


def test_echo_puts_the_prompt_before_each_completion(client):
    plain = client.completions.create(model=NAME, prompt=["Once upon", "The sky"], max_tokens=5,
                                      temperature=0, extra_body={"ignore_eos": True})
    echoed = client.completions.create(model=NAME, prompt=["Once upon", "The sky"], max_tokens=5,
                                       temperature=0, echo=True, extra_body={"ignore_eos": True})
    assert [c.text for c in echoed.choices] == ["Once upon" + plain.choices[0].text,
                                                "The sky" + plain.choices[1].text]
    streamed = ["", ""]
    for ch in client.completions.create(model=NAME, prompt=["Once upon", "The sky"], max_tokens=5,
                                        temperature=0, echo=True, stream=True,
                                        extra_body={"ignore_eos": True}):
        for c in ch.choices:
            streamed[c.index] += c.text
    assert streamed == [c.text for c in echoed.choices]
    assert echoed.usage == plain.usage


def test_models_list_and_retrieve_with_the_official_client(client):
    assert [m.id for m in client.models.list()] == [NAME]
    assert client.models.retrieve(NAME).id == NAME
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("other-model")


def test_tokenize_counts_what_a_chat_request_is_billed_and_detokenize_inverts_it(client, server):
    messages = ask(7)
    tok = httpx.post(server + "/tokenize", json={"model": NAME, "messages": messages}, timeout=60).json()
    billed = greedy_chat(client, messages, max_tokens=1).usage.prompt_tokens
    assert tok["count"] == len(tok["tokens"]) == billed and tok["max_model_len"] == MAX_LEN
    text = httpx.post(server + "/tokenize", json={"prompt": "The sky is blue", "add_special_tokens": False},
                      timeout=60).json()
    back = httpx.post(server + "/detokenize", json={"model": NAME, "tokens": text["tokens"]}, timeout=60).json()
    assert back == {"prompt": "The sky is blue"}
    for path, body, param, status in (
            ("/tokenize", {"model": NAME}, "prompt", 400),
            ("/tokenize", {"prompt": "a", "messages": messages}, "prompt", 400),
            ("/tokenize", {"model": "nope", "prompt": "a"}, "model", 404),
            ("/detokenize", {"tokens": [10**9]}, "tokens", 400),
            ("/detokenize", {}, "tokens", 400)):
        r = httpx.post(server + path, json=body, timeout=60)
        assert r.status_code == status and r.json()["error"]["param"] == param, (path, body, r.text)


def test_echo_with_logprobs_scores_the_prompt(client, server):
    """lm-eval's loglikelihood request: echo + logprobs scores every prompt token."""
    prompt = "The cat sat on the mat because"
    ids = httpx.post(server + "/tokenize", json={"prompt": prompt}, timeout=60).json()["tokens"]
    kw = dict(model=NAME, prompt=prompt, max_tokens=3, temperature=0, logprobs=2,
              extra_body={"ignore_eos": True})
    plain = client.completions.create(**kw).choices[0]
    echoed = client.completions.create(echo=True, **kw).choices[0]
    lp = echoed.logprobs
    n = len(ids)
    assert echoed.text == prompt + plain.text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n + 3
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v <= 0 for v in lp.token_logprobs[1:])
    assert all(lp.tokens[i] in lp.top_logprobs[i] and len(lp.top_logprobs[i]) <= 3 for i in range(1, n))
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    # the generated part is what the request without echo reported
    assert lp.tokens[n:] == plain.logprobs.tokens
    assert lp.token_logprobs[n:] == pytest.approx(plain.logprobs.token_logprobs, abs=1e-5)
    assert lp.text_offset[n] == sum(len(t) for t in lp.tokens[:n])
    # streamed: the echo (with its logprobs) comes first, then the tokens
    streamed = list(client.completions.create(echo=True, stream=True, **kw))
    first = streamed[0].choices[0]
    assert first.text == prompt and first.logprobs.token_logprobs == pytest.approx(
        [None] + lp.token_logprobs[1:n], abs=1e-5)
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == echoed.text

    # vLLM's prompt_logprobs: one entry per prompt token, keyed by token id, the same values
    raw = httpx.post(server + "/v1/completions", json={
        "model": NAME, "prompt": prompt, "max_tokens": 1, "prompt_logprobs": 1}, timeout=60).json()
    scored = raw["choices"][0]["prompt_logprobs"]
    assert len(scored) == n and scored[0] is None
    for i in range(1, n):
        entry = scored[i][str(ids[i])]
        assert entry["logprob"] == pytest.approx(lp.token_logprobs[i], abs=1e-5)
        assert entry["rank"] >= 1 and entry["decoded_token"] == lp.tokens[i]
        assert len(scored[i]) <= 2
    chat = httpx.post(server + "/v1/chat/completions", json={
        "model": NAME, "messages": ask(9), "max_tokens": 1, "prompt_logprobs": 0}, timeout=60).json()
    assert len(chat["prompt_logprobs"]) == chat["usage"]["prompt_tokens"]
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # computed whole


def special_token_id(server: str, text: str) -> int:
    r = httpx.post(server + "/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=30)
    (token,) = r.json()["tokens"]
    return token


def test_skip_special_tokens_false_keeps_them_in_the_text(server, client):
    im_start = special_token_id(server, "<|im_start|>")
    kw = dict(max_tokens=3, logit_bias={str(im_start): 100})
    hidden = greedy_chat(client, ask(9), **kw)
    shown = greedy_chat(client, ask(9), extra_body={"skip_special_tokens": False}, **kw)
    assert hidden.choices[0].message.content == ""
    assert shown.choices[0].message.content == "<|im_start|>" * 3
    assert hidden.usage.completion_tokens == shown.usage.completion_tokens == 3


def test_continue_final_message_continues_the_assistant_prefill(server, client):
    prefill = [*ask(10), {"role": "assistant", "content": "The capital is"}]
    body = {"messages": prefill, "continue_final_message": True}
    tokens = httpx.post(server + "/tokenize", json=body, timeout=30).json()["tokens"]
    text = httpx.post(server + "/detokenize", json={"tokens": tokens}, timeout=30).json()["prompt"]
    assert text.endswith("<|im_start|>assistant\nThe capital is")
    r = greedy_chat(client, prefill, max_tokens=4, extra_body={"continue_final_message": True})
    assert r.usage.prompt_tokens == len(tokens)
