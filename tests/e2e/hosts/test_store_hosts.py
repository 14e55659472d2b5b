"""The shared KV store across hosts: a mooncake_master on one host, two workers on two others,
each a client of it. A prompt computed on one worker is a cache hit on the other (reported as
`cached_tokens`), with the same greedy output as one engine."""

from __future__ import annotations

import time

import pytest

from tandem.testing.hosts import MASTER_PORT
from tests.e2e.hosts.client import complete, prompt, text_of, tier_metric, wait_no_blocks_held

pytestmark = pytest.mark.timeout(120)

STORE_ARGS = ("--block-size", "4", "--kv-host-memory", "4MiB", "--kv-store-memory", "64MiB",
              "--kv-tier-no-cost-check")


def store_workers(net, cluster, n: int = 2) -> list[str]:
    store = net.add_host("store")
    cluster.master("master", store)
    names = []
    for i in range(n):
        h = net.add_host(f"w{i}")
        cluster.worker(f"w{i}", h, "both", transport=None,
                       extra=[*STORE_ARGS, f"--kv-store=mooncake://{store.addr}:{MASTER_PORT}"])
        names.append(f"w{i}")
    cluster.wait_ready()
    return names


def wait_store_available(cluster, names, timeout_s: float = 30.0) -> float:
    """Each worker's store client has connected to the master."""
    return cluster.wait_until("store clients connected", lambda: all(
        tier_metric(cluster.url(n), "kv_offload_tiering_available", "store") >= 1 for n in names), timeout_s)


def test_store_serves_a_prefix_computed_on_another_host(net, cluster, reference):
    w0, w1 = store_workers(net, cluster)
    wait_store_available(cluster, [w0, w1])
    ids = prompt(3, 41)                          # 10 full blocks of 4 before the last token
    want, _ = reference(ids, 8)
    first = complete(cluster.url(w0), ids, 8)
    assert text_of(first) == want
    assert first.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # w0 writes its blocks behind the answer; w1 never saw the prompt and loads them from the
    # store, whose bytes live in w0's memory on another host
    time.sleep(1.0)
    second = complete(cluster.url(w1), ids, 8)
    assert text_of(second) == want
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 40
    cluster.check_addresses()
    wait_no_blocks_held(cluster, [w0, w1])


def test_master_unreachable_costs_a_request_at_most_the_store_timeout(net, cluster, reference):
    """The master's host vanishes (link down): each worker pays one store call's timeout
    (--kv-store-timeout, 2 s) once, then serves from its own tiers at full speed; once the master
    is back, the store serves again and still holds what was put before."""
    w0, w1 = store_workers(net, cluster)
    wait_store_available(cluster, [w0, w1])
    before = prompt(70, 41)
    assert text_of(complete(cluster.url(w0), before, 8)) == reference(before, 8)[0]
    time.sleep(1.0)
    net.cut(net.hosts["store"])
    slowest = 0.0
    for k in range(6):
        ids = prompt(71 + k, 41)
        t0 = time.monotonic()
        r = complete(cluster.url((w0, w1)[k % 2]), ids, 8, timeout_s=30)
        slowest = max(slowest, time.monotonic() - t0)
        assert text_of(r) == reference(ids, 8)[0]
        if k >= 2:    # after its one timed-out call, a worker does not wait on the store again
            assert time.monotonic() - t0 < 1.5
    print(f"master unreachable: slowest request {slowest:.2f} s")
    assert slowest < 2.0 + 2.0, slowest
    assert all(tier_metric(cluster.url(n), "kv_offload_tiering_available", "store") == 0 for n in (w0, w1))
    wait_no_blocks_held(cluster, [w0, w1])
    net.restore(net.hosts["store"])
    wait_store_available(cluster, [w0, w1], timeout_s=30)
    r = complete(cluster.url(w1), before, 8)
    assert text_of(r) == reference(before, 8)[0]
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 40
