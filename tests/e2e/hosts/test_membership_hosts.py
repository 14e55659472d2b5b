"""Workers join and leave a gateway on another host by registration (`tandem serve --gateway`):
a worker started later serves within seconds; a worker stopped with SIGTERM drains (its streams
finish where they are, new requests go elsewhere), deregisters, and exits 0."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.e2e.hosts.client import complete, metric, prompt, stream, text_of, wait_no_blocks_held

pytestmark = pytest.mark.timeout(120)

GATEWAY_ARGS = ["--prefill-placement", "remote"]


def registered(cluster, gateway: str, name: str) -> dict | None:
    return next((w for w in cluster.workers_seen(gateway) if w["url"] == cluster.url(name)), None)


def test_a_worker_started_later_serves_within_seconds(net, cluster, reference):
    g, p0, d0, d1 = (net.add_host(n) for n in ("gw0", "p0", "d0", "d1"))
    cluster.gateway("gw0", g, extra=GATEWAY_ARGS)
    gw = cluster.url("gw0")
    cluster.worker("p0", p0, "prefill", gateway=gw)
    cluster.worker("d0", d0, "decode", gateway=gw)
    cluster.wait_ready()
    cluster.wait_until("gw0 ready with its registered workers", lambda: cluster.healthy("gw0") and len(
        [w for w in cluster.workers_seen("gw0") if w["healthy"]]) == 2, 60)
    ids = prompt(1, 50)
    want, _ = reference(ids, 16)
    assert text_of(complete(gw, ids, 16)) == want

    cluster.worker("d1", d1, "decode", gateway=gw)
    cluster.wait_until("d1 up", lambda: cluster.healthy("d1"), 60)
    up = time.monotonic()
    httpx.post(gw + "/internal/drain", json={"url": cluster.url("d0")}, timeout=5)   # so d1 is chosen
    while True:
        r = complete(gw, ids, 16)
        if r.status_code == 200 and r.headers["x-tandem-decode"] == cluster.url("d1"):
            break
        assert time.monotonic() - up < 10, f"d1 not serving 10 s after it was up: {r.status_code} {r.text}"
        time.sleep(0.1)
    joined_s = time.monotonic() - up
    print(f"worker started later: served {joined_s:.2f} s after its /health answered")
    assert text_of(r) == want
    assert joined_s < 5, joined_s
    assert registered(cluster, "gw0", "d1")["healthy"]
    cluster.check_addresses()
    wait_no_blocks_held(cluster, ["p0", "d0", "d1"])


def test_sigterm_drains_streams_then_deregisters(net, cluster, reference):
    g, p0, d0, d1 = (net.add_host(n) for n in ("gw0", "p0", "d0", "d1"))
    cluster.gateway("gw0", g, extra=GATEWAY_ARGS)
    gw = cluster.url("gw0")
    cluster.worker("p0", p0, "prefill", gateway=gw)
    for name, host in (("d0", d0), ("d1", d1)):
        cluster.worker(name, host, "decode", gateway=gw, extra=["--drain-timeout", "40"])
    cluster.wait_ready()
    cluster.wait_until("gw0 sees its 3 workers", lambda: cluster.healthy("gw0") and len(
        [w for w in cluster.workers_seen("gw0") if w["healthy"]]) == 3, 60)

    # streams long enough to be running when the signal comes (each ~2-4 s on one thread)
    n_tokens = 500
    results: dict[int, object] = {}
    started = threading.Barrier(5)

    def run(i: int) -> None:
        first = threading.Event()

        def on_chunk(k, so_far):
            if k == 1:
                first.set()
                started.wait(30)

        results[i] = stream(gw, prompt(10 + i, 40), n_tokens, on_chunk)
        if not first.is_set():
            started.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait(30)                      # every stream has its first token
    by_worker: dict[str, int] = {}
    for w in cluster.workers_seen("gw0"):
        if w["role"] == "decode":
            by_worker[w["url"]] = w["inflight_requests"]
    victim = max(by_worker, key=by_worker.get)
    victim_name = "d0" if victim == cluster.url("d0") else "d1"
    other = "d1" if victim_name == "d0" else "d0"
    assert by_worker[victim] >= 1, by_worker
    migrations = metric(gw, "tandem:gateway_migrations")
    t_sig = time.monotonic()
    cluster.send(victim_name, signal.SIGTERM)

    # while it drains: it is still registered, marked draining; new requests go to the other one
    cluster.wait_until(f"{victim_name} draining at gw0",
                       lambda: (registered(cluster, "gw0", victim_name) or {}).get("draining"), 5)
    for k in range(3):
        r = complete(gw, prompt(30 + k, 30), 8)
        assert r.status_code == 200 and r.headers["x-tandem-decode"] == cluster.url(other)
        assert text_of(r) == reference(prompt(30 + k, 30), 8)[0]
    for t in threads:
        t.join(60)
    code = cluster.procs[victim_name].proc.wait(30)
    left_s = time.monotonic() - t_sig
    print(f"SIGTERM drain: exited {left_s:.2f} s after the signal")
    assert code == 0, cluster.procs[victim_name].describe()
    assert registered(cluster, "gw0", victim_name) is None     # deregistered
    for i, s in results.items():                                 # every stream finished in place
        assert s.error is None and s.text == reference(prompt(10 + i, 40), n_tokens)[0], i
        assert s.usage["completion_tokens"] == n_tokens
    assert metric(gw, "tandem:gateway_migrations") == migrations   # none moved: they drained
    assert left_s < 40
    wait_no_blocks_held(cluster, ["p0", other])
