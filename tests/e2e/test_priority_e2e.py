"""Priority end to end: a real `tandem serve` (one sequence slot) behind a real gateway. A request
of priority 0 overtakes queued requests of priority 10, and takes the slot of the running one,
sent to the worker directly and through the gateway; the preempted request's greedy output is the
same as alone. Asserts orders of first tokens and completions, never timings."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc
from tests.e2e.test_gateway_e2e import assert_no_blocks_held, metric, running

pytestmark = pytest.mark.timeout(300)

LONG = 1500   # tokens of the running request: it is still running when the others arrive


def _stream(base: str, name: str, prompt: str, priority: int, max_tokens: int, events: list, texts: dict):
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "priority": priority}
    chunks = []
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=180) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            for c in event.get("choices", []):
                if c.get("text"):
                    if not chunks:
                        events.append(("first", name))
                    chunks.append(c["text"])
    events.append(("done", name))
    texts[name] = "".join(chunks)


def _wait(cond, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_better_request_overtakes_queued_and_running_worse_ones(llama_dir):
    model = str(llama_dir)
    worker = worker_proc("w0", model, "both", "127.0.0.1", free_port(), None,
                         ("--kv-cache-memory", "16MiB", "--dtype", "float32", "--served-model-name", "m",
                          "--device", "cpu", "--max-num-seqs", "1"))
    gateway = gateway_proc(model, "127.0.0.1", free_port(avoid={int(worker.url.rsplit(":", 1)[1])}), [worker],
                           "round_robin", ("--served-model-name", "m", "--no-queue"))
    cluster = LocalCluster([worker, ProcSpec("gateway", gateway.cmd, gateway.url, None)])
    prompts = {n: f"Request {n} asks about the quick brown fox. " * 2 for n in "ABCD"}
    with running(cluster):
        alone = httpx.post(worker.url + "/v1/completions", timeout=180, json={
            "model": "m", "prompt": prompts["A"], "max_tokens": LONG, "temperature": 0,
            "ignore_eos": True, "priority": 10}).json()["choices"][0]["text"]
        for base in (worker.url, gateway.url):
            events: list = []
            texts: dict = {}
            errors: list = []

            def send(name, priority, max_tokens):
                def run():
                    try:
                        _stream(base, name, prompts[name], priority, max_tokens, events, texts)
                    except BaseException as exc:   # noqa: BLE001 - reported by the main thread
                        errors.append((name, exc))
                t = threading.Thread(target=run)
                t.start()
                return t

            preempted_before = metric(worker.url, "tandem:num_preemptions")
            threads = [send("A", 10, LONG)]
            _wait(lambda: ("first", "A") in events or errors, "A's first token")
            for i, name in enumerate("BC", 1):     # queued in this order
                threads.append(send(name, 10, 20))
                _wait(lambda i=i: metric(worker.url, "tandem:num_requests_waiting") >= i or errors,
                      f"{name} queued")
            threads.append(send("D", 0, 20))
            for t in threads:
                t.join(180)
            assert not errors, errors
            firsts = [n for kind, n in events if kind == "first"]
            done = [n for kind, n in events if kind == "done"]
            # D (priority 0) took A's slot and went before B and C, queued before it; A, sent back
            # to the queue's front, resumed first among the priority-10 requests
            assert firsts == ["A", "D", "B", "C"], (base, events)
            assert done == ["D", "A", "B", "C"], (base, events)
            assert metric(worker.url, "tandem:num_preemptions") > preempted_before
            assert texts["A"] == alone      # recomputed after its preemption: the same greedy tokens
        assert_no_blocks_held(cluster)
