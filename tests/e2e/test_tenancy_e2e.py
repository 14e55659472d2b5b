"""Two tenants (two --api-key values) on a real gateway and worker (tiny test model, processes on
127.0.0.1): the prefix cache is partitioned by tenant (tenant B's first send of tenant A's prompt
computes it all, A's second is a hit, the gateway routes A's by its prefix and B's by load, greedy
output identical), unless the gateway shares prefixes (--share-prefix-cache); and nothing one
tenant creates is visible to the other through any route (tests/api/tenancy_checks.py).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tandem import cluster_secret
from tests.asyncq.receiver import Receiver
from tests.asyncq.servers import free_port
from tests.e2e.test_gateway_e2e import assert_no_blocks_held, build, metric, running, url
from tests.api.tenancy_checks import auth, check_every_route_is_owned, posted_events

pytestmark = pytest.mark.timeout(400)

KEYS = ("tenant-a-key", "tenant-b-key")
A, B = auth(KEYS[0]), auth(KEYS[1])
SECRET = "tenancy-e2e-cluster-secret"   # /internal routes: the cluster's, never a tenant's
BLOCK = 16     # the worker's default block size
PREFIX = 'tandem:gateway_routing_decisions_total{policy="prefix_aware",pool="both",reason="prefix"}'


@pytest.fixture(scope="module")
def cluster(llama_dir, tmp_path_factory):
    keys = ("--api-key", KEYS[0], "--api-key", KEYS[1])
    queue = str(tmp_path_factory.mktemp("queue") / "queue.db")
    c = build(str(llama_dir), ["both"],
              {"gateway": ([0], "prefix_aware", (*keys, "--queue-db", queue)),
               "shared": ([0], "prefix_aware", (*keys, "--no-queue", "--share-prefix-cache"))})
    c.cluster_secret = SECRET
    with running(c):
        yield c


def chat(base: str, key: dict, content: str) -> dict:
    r = httpx.post(base + "/v1/chat/completions", headers=key, timeout=120, json={
        "model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 8,
        "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def cached(reply: dict) -> int:
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def indexed(base: str) -> int:
    """Blocks of the worker the gateway's prefix index holds (fed by the worker's KV events)."""
    r = httpx.get(base + "/internal/workers", headers=cluster_secret.headers(SECRET), timeout=5)
    return r.json()["workers"][0]["cached_blocks"]


def wait_indexed(base: str, blocks: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while indexed(base) < blocks:
        assert time.monotonic() < deadline, "the gateway never saw the worker's blocks"
        time.sleep(0.1)


def long_prompt(seed: int) -> str:
    return " ".join(f"tool{seed}_{i} returned {i * 7 % 13}." for i in range(150))


def test_the_prefix_cache_is_partitioned_by_tenant(cluster):
    g = url(cluster, "gateway")
    prompt = long_prompt(1)
    before = indexed(g)
    first = chat(g, A, prompt)
    n = first["usage"]["prompt_tokens"]
    assert n > 1000 and cached(first) == 0
    full = n // BLOCK
    wait_indexed(g, before + full)
    routed_by_prefix = metric(g, PREFIX)
    other = chat(g, B, prompt)          # the leak found in #30: B's first send hit A's blocks
    assert cached(other) == 0
    assert metric(g, PREFIX) == routed_by_prefix    # the gateway found no prefix of B's either
    wait_indexed(g, before + 2 * full)              # B's own blocks now, under B's hashes
    again = chat(g, A, prompt)
    assert cached(again) == (n - 1) // BLOCK * BLOCK
    assert metric(g, PREFIX) == routed_by_prefix + 1
    assert cached(chat(g, B, prompt)) == (n - 1) // BLOCK * BLOCK    # B's own second send hits
    texts = {r["choices"][0]["message"]["content"] for r in (first, other, again)}
    assert len(texts) == 1                          # greedy: the same tokens hit or miss
    assert_no_blocks_held(cluster)


def test_an_operator_may_share_prefixes_across_tenants(cluster):
    """--share-prefix-cache: the tenant leaves the hash, so B's first send hits A's blocks (the
    behaviour before #30), routed by prefix; a cache_salt still separates."""
    s = url(cluster, "shared")
    prompt = long_prompt(2)
    before = indexed(s)
    first = chat(s, A, prompt)
    n = first["usage"]["prompt_tokens"]
    wait_indexed(s, before + n // BLOCK)
    routed_by_prefix = metric(s, PREFIX)
    other = chat(s, B, prompt)
    assert cached(first) == 0 and cached(other) == (n - 1) // BLOCK * BLOCK
    assert metric(s, PREFIX) == routed_by_prefix + 1
    assert other["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    r = httpx.post(s + "/v1/chat/completions", headers=B, timeout=120, json={
        "model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2,
        "temperature": 0, "cache_salt": "b-only"})
    assert r.status_code == 200 and cached(r.json()) == 0
    assert_no_blocks_held(cluster)


def test_two_tenants_never_see_each_others_objects(cluster):
    hook_a, hook_b = Receiver(free_port()), Receiver(free_port())
    hook_a.start()
    hook_b.start()
    try:
        with httpx.Client(base_url=url(cluster, "gateway"), timeout=60) as client:
            owned = check_every_route_is_owned(client, A, B, "m", f"http://127.0.0.1:{hook_a.port}/a",
                                               f"http://127.0.0.1:{hook_b.port}/b")
        deadline = time.monotonic() + 60
        while len(hook_a.posts) < 2 or len(hook_b.posts) < 2:   # queued + succeeded, each
            assert time.monotonic() < deadline, (hook_a.posts, hook_b.posts)
            time.sleep(0.1)
        assert {(s, r) for s, r, _ in posted_events(hook_a.posts)} == {(owned.subscription_id, owned.request_id)}
        assert {(s, r) for s, r, _ in posted_events(hook_b.posts)} == \
            {(owned.b_subscription_id, owned.b_request_id)}
    finally:
        hook_a.stop()
        hook_b.stop()
    assert_no_blocks_held(cluster)
