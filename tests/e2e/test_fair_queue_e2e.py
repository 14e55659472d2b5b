"""Flow control at the gateway end to end: a real worker (tiny model) behind a real gateway that
keeps one request in flight (--max-in-flight 1, --no-tenant-overflow: a tenant below its share
waits too), three tenants (--api-key). While tenant C's stream holds the only slot, tenant A
floods and tenant B sends two: A's queue fills (the next gets 429 with Retry-After), and once C's
client leaves, B's two are served before most of A's.
Every accepted request is answered, the queue depths in /metrics return to 0, no KV block is
left held. Asserts orders and counts, never timings."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.e2e.test_gateway_e2e import assert_no_blocks_held, build, metric, running, url

pytestmark = pytest.mark.timeout(120)

KEYS = ("fq-tenant-a", "fq-tenant-b", "fq-tenant-c")
A_QUEUE = 6
PROMPT = "Tell me about the quick brown fox. "


def auth(i: int) -> dict:
    return {"Authorization": f"Bearer {KEYS[i]}"}


def depth(base: str, tenant: str) -> float:
    return metric(base, f'tandem:gateway_queue_depth{{tenant="{tenant}"}}')


def wait_for(cond, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_flooding_tenant_waits_its_turn_and_a_full_queue_is_429(llama_dir):
    keys = tuple(a for k in KEYS for a in ("--api-key", k))
    cluster = build(str(llama_dir), ["both"], {"gateway": ([0], "round_robin", (
        *keys, "--no-queue", "--max-in-flight", "1", "--no-tenant-overflow",
        "--fair-queue-max-requests", str(A_QUEUE)))})
    cluster.cluster_secret = "fair-queue-e2e-cluster-secret"   # /internal: never a tenant's key
    with running(cluster):
        base = url(cluster, "gateway")
        done: list[str] = []
        errors: list = []
        lock = threading.Lock()

        def send(name: str, key: int) -> threading.Thread:
            def run():
                try:
                    r = httpx.post(base + "/v1/completions", headers=auth(key), timeout=60, json={
                        "model": "m", "prompt": PROMPT, "max_tokens": 16, "temperature": 0,
                        "ignore_eos": True})
                    assert r.status_code == 200, r.text
                    assert r.json()["usage"]["completion_tokens"] == 16
                    with lock:
                        done.append(name)
                except BaseException as exc:   # noqa: BLE001 - reported by the main thread
                    errors.append((name, exc))
            t = threading.Thread(target=run)
            t.start()
            return t

        body = {"model": "m", "prompt": PROMPT, "max_tokens": 1500, "temperature": 0,
                "ignore_eos": True, "stream": True}
        threads = []
        with httpx.stream("POST", base + "/v1/completions", headers=auth(2), json=body,
                          timeout=60) as blocker:
            assert blocker.status_code == 200
            lines = blocker.iter_lines()
            assert next(lines).startswith("data: ")      # C holds the only slot
            threads += [send(f"A{i}", 0) for i in range(A_QUEUE)]
            wait_for(lambda: depth(base, "key-0") == A_QUEUE, "A's queue to fill")
            full = httpx.post(base + "/v1/completions", headers=auth(0), timeout=30, json={
                "model": "m", "prompt": PROMPT, "max_tokens": 16})
            assert full.status_code == 429, full.text
            assert full.json()["error"]["code"] == "rate_limit_exceeded"
            assert int(full.headers["retry-after"]) >= 1
            threads += [send(f"B{i}", 1) for i in range(2)]
            wait_for(lambda: depth(base, "key-1") == 2, "B's requests to queue")
            assert not done and not errors
            event = json.loads(next(ln for ln in lines if ln.startswith("data: "))[6:])
            assert "error" not in event                    # C still streams; its client now leaves
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert sorted(done) == sorted([f"A{i}" for i in range(A_QUEUE)] + ["B0", "B1"])
        # one at a time, A and B alternating while both wait: B's two are among the first four
        # served (one place of slack for the order in which client threads record completions)
        last_b = max(done.index("B0"), done.index("B1"))
        assert last_b <= 4, done
        assert depth(base, "key-0") == 0 and depth(base, "key-1") == 0
        assert metric(base, 'tandem:gateway_queue_rejected_total{reason="queue_full",tenant="key-0"}') == 1
        assert metric(base, "tandem:gateway_queue_wait_seconds_count") >= A_QUEUE + 2
        assert_no_blocks_held(cluster)
