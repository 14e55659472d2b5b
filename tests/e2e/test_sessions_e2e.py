"""Sessions placed for their future, end to end: `tandem up --colocated 2`, eight conversations
sharing a ~300-word system prompt, sent one after another. Without `x-session-affinity` the
gateway recognises each conversation by its first messages: the eight spread four and four over
the two workers (the worker that computed the system prompt first does not take them all), and
each conversation's second turn goes to the worker of its first. With the header, the same."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tandem.launcher.cluster import free_port
from tandem.testing.server_process import tandem_up

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
SYSTEM = " ".join(["You are a careful coding agent; read the files before you edit them."] * 25)


def chat(base: str, messages: list[dict], headers: dict | None = None) -> httpx.Response:
    body = {"model": "m", "messages": messages, "max_tokens": 4, "temperature": 0}
    r = httpx.post(base + "/v1/chat/completions", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return r


def conversation(i: int) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Task {i}: fix bug {i * 7}."}]


@pytest.fixture(scope="module")
def cluster(llama_dir):
    port = free_port()
    with tandem_up(["--model", str(llama_dir), "--colocated", "2", "--port", str(port),
                    "--ready-timeout", "180", "--worker-arg=--kv-cache-memory=16MiB",
                    "--worker-arg=--dtype=float32", "--worker-arg=--served-model-name=m",
                    "--gateway-arg=--served-model-name=m"],
                   cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}):
        yield f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("header", [False, True])
def test_eight_sessions_spread_and_stay(cluster, header):
    offset = 100 if header else 0   # new conversations for the second run
    first = {}
    for i in range(offset, offset + 8):
        h = {"x-session-affinity": f"agent-{i}"} if header else None
        r = chat(cluster, conversation(i), h)
        first[i] = (r.headers["x-tandem-decode"], r.json()["choices"][0]["message"]["content"] or "", h)
    split = Counter(w for w, _, _ in first.values())
    assert len(split) == 2 and max(split.values()) - min(split.values()) <= 1, split
    for i, (worker, answer, h) in first.items():
        follow = conversation(i) + [{"role": "assistant", "content": answer},
                                    {"role": "user", "content": "Tool result: 3 tests failed."}]
        r = chat(cluster, follow, h)
        assert r.headers["x-tandem-decode"] == worker, (i, split)
