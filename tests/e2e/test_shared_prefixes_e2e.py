"""Operator-declared shared prefixes on a real gateway and two workers (tiny test model, processes
on 127.0.0.1), two tenants (two --api-key values) sending the same chat with a declared system
prompt: tenant B's first send is a hit on exactly the declaration's whole blocks that A computed,
never on A's question (B asks the same one), routed by those blocks to A's worker (the gateway
hashes as its workers do); A's second send hits all of its own. Without the declaration (a second
gateway over the same workers) B's first send hits nothing. A standalone worker (its own gateway)
shares the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tandem import cluster_secret
from tandem.launcher.cluster import free_port
from tandem.kv.shared_prefixes import common_prefix
from tandem.tokenization.chat_prompt import ChatRender, render_chat
from tandem.testing.server_process import stop, wait_healthy
from tandem.tokenization.tokenizer import Tokenizer
from tests.api.tenancy_checks import auth
from tests.e2e.test_gateway_e2e import assert_no_blocks_held, build, metric, running, url

pytestmark = pytest.mark.timeout(400)

KEYS = ("tenant-a-key", "tenant-b-key")
A, B = auth(KEYS[0]), auth(KEYS[1])
SECRET = "shared-prefixes-e2e-cluster-secret"
BLOCK = 16     # the workers' default block size
SYSTEM = {"role": "system", "content": " ".join(f"Rule {i}: answer order {i * 7 % 13} politely."
                                                for i in range(40))}
PREFIX = 'tandem:gateway_routing_decisions_total{policy="prefix_aware",pool="both",reason="prefix"}'


@pytest.fixture(scope="module")
def cluster(llama_dir, tmp_path_factory):
    declared = tmp_path_factory.mktemp("shared") / "shared.json"
    declared.write_text(json.dumps({"prefixes": [{"name": "support", "messages": [SYSTEM]}]}))
    keys = ("--api-key", KEYS[0], "--api-key", KEYS[1], "--no-queue")
    c = build(str(llama_dir), ["both", "both"],
              {"declared": ([0, 1], "prefix_aware", (*keys, "--shared-prefixes", str(declared))),
               "plain": ([0, 1], "prefix_aware", keys)})
    c.cluster_secret = SECRET
    with running(c):
        yield c


@pytest.fixture(scope="module")
def tokenizer(llama_dir):
    return Tokenizer.from_dir(llama_dir)


def messages(question: str) -> list[dict]:
    return [SYSTEM, {"role": "user", "content": question}]


def chat(base: str, key: dict, question: str) -> httpx.Response:
    r = httpx.post(base + "/v1/chat/completions", headers=key, timeout=120, json={
        "model": "m", "messages": messages(question), "max_tokens": 4, "temperature": 0,
        "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r


def cached(r: httpx.Response) -> int:
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def indexed(base: str) -> int:
    """Blocks of every worker the gateway's prefix index holds (fed by the workers' KV events)."""
    r = httpx.get(base + "/internal/workers", headers=cluster_secret.headers(SECRET), timeout=5)
    return sum(w["cached_blocks"] for w in r.json()["workers"])


def wait_indexed(base: str, blocks: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while indexed(base) < blocks:
        assert time.monotonic() < deadline, "the gateway never saw the workers' blocks"
        time.sleep(0.1)


def shared_part(tokenizer, question: str) -> int:
    """Tokens of the declaration's whole blocks a request with this question starts with."""
    declared = render_chat(tokenizer, [SYSTEM], None, ChatRender(add_generation_prompt=False))
    prompt = render_chat(tokenizer, messages(question), None)
    n = common_prefix(declared, prompt)
    assert n >= len(declared) - 1 and n >= 4 * BLOCK   # the template keeps the system text as is
    return n // BLOCK * BLOCK


def test_tenants_share_the_declared_prefix_and_nothing_after_it(cluster, tokenizer):
    g = url(cluster, "declared")
    question = "Where is my order number 4411? It was due on Monday."
    shared = shared_part(tokenizer, question)
    before = indexed(g)
    first = chat(g, A, question)
    n = first.json()["usage"]["prompt_tokens"]
    assert cached(first) == 0 and n > shared + BLOCK   # A's question fills whole blocks of its own
    wait_indexed(g, before + n // BLOCK)
    routed_by_prefix = metric(g, PREFIX)
    other = chat(g, B, question)       # the same question: only the declaration may hit
    assert cached(other) == shared
    # the gateway found B's shared blocks where A's request put them
    assert metric(g, PREFIX) == routed_by_prefix + 1
    assert other.headers["x-tandem-decode"] == first.headers["x-tandem-decode"]
    again = chat(g, A, question)
    assert cached(again) == (n - 1) // BLOCK * BLOCK   # A's own blocks past the declaration
    texts = {r.json()["choices"][0]["message"]["content"] for r in (first, other, again)}
    assert len(texts) == 1                              # greedy: the same tokens hit or miss
    assert_no_blocks_held(cluster)


def test_without_the_declaration_nothing_is_shared(cluster):
    p = url(cluster, "plain")
    question = "Can I change the address of order 90210 before it ships?"
    before = indexed(p)
    first = chat(p, A, question)
    assert cached(first) == 0
    n = first.json()["usage"]["prompt_tokens"]
    wait_indexed(p, before + n // BLOCK)
    assert cached(chat(p, B, question)) == 0
    assert cached(chat(p, A, question)) == (n - 1) // BLOCK * BLOCK
    assert_no_blocks_held(cluster)


def test_a_standalone_worker_shares_the_declared_prefix(llama_dir, tokenizer, tmp_path):
    declared = tmp_path / "shared.json"
    declared.write_text(json.dumps({"prefixes": [{"messages": [SYSTEM]}]}))
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "serve", "--model", str(llama_dir),
                             "--port", str(port), "--threads", "1", "--log-level", "warning",
                             "--kv-cache-memory", "16MiB", "--dtype", "float32", "--served-model-name", "m",
                             "--no-queue", "--api-key", KEYS[0], "--api-key", KEYS[1],
                             "--shared-prefixes", str(declared)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, 120, describe=lambda: (tmp_path / "serve.log").read_text()[-2000:])
        question = "Is order 31337 insured?"
        assert cached(chat(base, A, question)) == 0
        assert cached(chat(base, B, question)) == shared_part(tokenizer, question)
    finally:
        stop(proc)
        log.close()
