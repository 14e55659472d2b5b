"""The planner on self-registered workers, end to end: a real gateway with no worker flags and two
real `tandem serve --role prefill --gateway URL` workers (tiny model, one core each). An ITL target
no request can meet and a TTFT target every request meets make the planner move one prefill
worker to decode; the gateway drains it, tells it to switch (POST /internal/role), and takes its
new role. Four clients send requests to the gateway all along, and each worker also streams a long
request sent to it directly (which the gateway does not see), so the moved worker has work to
drain: the switch waits for it. That stream is live at the drain by construction, not by speed: it
asks for more tokens than the test lets it generate, and only the test ends it (closing the stream,
which aborts it on the worker) once it has seen tokens still coming while the worker drains and the
role unchanged. Every request succeeds with the same greedy text, the worker's
role changed in /internal/workers and stays changed (its heartbeats still name the role it started
with), and the switch is counted."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc
from tests.e2e.test_gateway_e2e import CORES, GATEWAY_ARGS, PROMPT, WORKER_ARGS, assert_no_blocks_held

pytestmark = pytest.mark.timeout(300)

PLANNER_ARGS = ("--slo-ttft-ms", "100000", "--slo-itl-ms", "0.001", "--planner-interval", "1",
                "--planner-cooldown", "600", "--planner-min-samples", "3")


def roles(base: str) -> list[tuple[str, bool, bool]]:
    ws = httpx.get(base + "/internal/workers", timeout=5).json()["workers"]
    return sorted((w["role"], w["healthy"], w["draining"]) for w in ws)


def wait_for(cluster: LocalCluster, cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        cluster.check_alive()
        try:
            if cond():
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


LONG = 400     # tokens of the reference long answer
ENDLESS = 1900  # max_tokens of the direct streams (within the model's 2048): only the test ends them


def complete(base: str, max_tokens: int = 32) -> httpx.Response:
    body = {"model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    return httpx.post(base + "/v1/completions", json=body, timeout=120)


def test_gateway_switches_a_registered_worker_without_losing_a_request(llama_dir):
    model = str(llama_dir)
    gport = free_port()
    gateway = f"http://127.0.0.1:{gport}"
    g = gateway_proc(model, "127.0.0.1", gport, [], "default", GATEWAY_ARGS + PLANNER_ARGS)
    taken = {gport}
    workers = []
    for i in range(2):
        port = free_port(avoid=taken)
        taken.add(port)
        workers.append(worker_proc(f"w{i}", model, "prefill", "127.0.0.1", port,
                                   (CORES[i % len(CORES)],), WORKER_ARGS + ("--gateway", gateway)))
    c = LocalCluster([ProcSpec("gateway", g.cmd, g.url, None), *workers])
    answers: list[tuple[int, str, str]] = []     # (status, text or error, x-tandem-decode)
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                r = complete(gateway)
            except httpx.HTTPError as exc:
                answers.append((0, repr(exc), ""))
                time.sleep(0.1)
                continue
            ok = r.status_code == 200
            answers.append((r.status_code, r.json()["choices"][0]["text"] if ok else r.text,
                            r.headers.get("x-tandem-decode", "")))

    direct: dict[str, tuple[int, str]] = {}   # worker url -> its long stream's status and text
    streamed: dict[str, list[str]] = {w.url: [] for w in workers}   # text chunks so far
    release = threading.Event()   # set by the test: the long streams stop reading and close

    def long_request(url: str) -> None:
        body = {"model": "m", "prompt": PROMPT, "max_tokens": ENDLESS, "temperature": 0,
                "ignore_eos": True, "stream": True}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            if r.status_code != 200:
                direct[url] = (r.status_code, r.read().decode())
                return
            for line in r.iter_lines():
                if release.is_set():
                    break   # leaving the block closes the stream: the worker aborts the request
                if line.startswith("data: ") and line != "data: [DONE]":
                    event = json.loads(line[6:])
                    if "error" in event:
                        direct[url] = (500, line)
                        return
                    streamed[url].extend(c["text"] for c in event["choices"] if c.get("text"))
        direct[url] = (200, "".join(streamed[url]))

    threads = [threading.Thread(target=client) for _ in range(4)]
    longs = [threading.Thread(target=long_request, args=(w.url,)) for w in workers]
    try:
        c.start()
        wait_for(c, lambda: roles(gateway) == [("prefill", True, False)] * 2, 150, "registration")
        # the reference texts, straight from a worker (no sample in the gateway's histograms)
        want = complete(workers[0].url).json()["choices"][0]["text"]
        want_long = complete(workers[1].url, LONG).json()["choices"][0]["text"]
        for t in longs + threads:
            t.start()
        draining: list[str] = []

        def drain_seen() -> bool:
            ws = httpx.get(gateway + "/internal/workers", timeout=5).json()["workers"]
            draining.extend(w["url"] for w in ws if w["switching_to"] == "decode" and w["draining"])
            return bool(draining)

        wait_for(c, drain_seen, 120, "a drain")
        # its long stream still runs (only `release` ends it): the switch has work to wait for, and
        # waits for it: tokens keep coming while the worker drains, its role unchanged
        assert draining[0] not in direct, direct
        seen = len(streamed[draining[0]])
        wait_for(c, lambda: len(streamed[draining[0]]) >= seen + 5, 60, "tokens while draining")
        role = httpx.get(draining[0] + "/internal/role", timeout=5).json()
        assert (role["role"], role["switching_to"]) == ("prefill", "decode"), role
        assert draining[0] not in direct, direct
        release.set()
        wait_for(c, lambda: roles(gateway) == [("decode", True, False), ("prefill", True, False)],
                 150, "the role switch")
        ws = httpx.get(gateway + "/internal/workers", timeout=5).json()["workers"]
        moved = next(w["url"] for w in ws if w["role"] == "decode")
        assert moved == draining[0]
        n = len(answers)
        wait_for(c, lambda: len(answers) >= n + 4, 60, "requests after the switch")
        time.sleep(3)   # heartbeats (every 2 s) still say "prefill": the worker's stats win
        assert roles(gateway) == [("decode", True, False), ("prefill", True, False)]
        stop.set()
        for t in threads + longs:
            t.join(120)
        planner = httpx.get(gateway + "/internal/planner", timeout=5).json()
        assert planner["seq"] == 1 and planner["in_flight"] is None, planner
        assert planner["switch"] == {"worker_id": moved, "from_role": "prefill", "to_role": "decode",
                                     "reason": "itl"}
        assert planner["last_outcome"]["done"], planner
        role = httpx.get(moved + "/internal/role", timeout=5).json()
        assert (role["role"], role["switching_to"], role["role_switches"]) == ("decode", None, 1)
        metrics = httpx.get(gateway + "/metrics", timeout=5).text
        assert ('tandem:gateway_role_switches_total{from_role="prefill",outcome="done",'
                'to_role="decode"} 1.0') in metrics
        assert_no_blocks_held(c)
    finally:
        stop.set()
        for t in threads + longs:
            if t.is_alive():
                t.join(120)
        c.stop()
    bad = [a for a in answers if a[:2] != (200, want)]
    assert answers and not bad, bad[:3]
    # both long streams were cut by the test, none failed, each a prefix of the same greedy text
    assert sorted(direct) == sorted(w.url for w in workers), direct
    for url, (status, text) in direct.items():
        n_common = min(len(text), len(want_long))
        assert status == 200 and n_common > 0 and text[:n_common] == want_long[:n_common], (url, text)
    assert any(a[2] == moved for a in answers[n:]), "no request was decoded by the moved worker"
