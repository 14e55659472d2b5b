"""The planner end to end: `tandem up --prefill 1 --decode 2` with a TTFT target no request can
meet and an ITL target every request meets. The gateway's planner moves a decode worker up the
ladder in two switches, decode -> both -> prefill; each time `tandem up` drains it and restarts
it in its new role, and the gateway polls it back in. While it is a both worker it serves whole
requests beside the decode worker; every request sent all along succeeds with the same greedy
text."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import httpx
import pytest

from tandem.launcher.cluster import free_port
from tests.e2e.test_up_supervision import INTERNAL, ROOT, SECRET, complete, wait_for
from tests.e2e.up_process import stop_up

pytestmark = pytest.mark.timeout(300)


def roles(base: str) -> list[tuple[str, bool, bool]]:
    ws = httpx.get(base + "/internal/workers", headers=INTERNAL, timeout=5).json()["workers"]
    return sorted((w["role"], w["healthy"], w["draining"]) for w in ws)


def test_planner_moves_a_decode_worker_to_both_then_prefill_without_losing_a_request(llama_dir, tmp_path):
    port = free_port()
    log = open(tmp_path / "up.log", "wb")
    cmd = [sys.executable, "-m", "tandem", "up", "--model", str(llama_dir), "--prefill", "1",
           "--decode", "2", "--port", str(port), "--ready-timeout", "200", "--policy", "round_robin",
           "--worker-arg=--kv-cache-memory=16MiB", "--worker-arg=--dtype=float32",
           "--worker-arg=--served-model-name=m", "--gateway-arg=--served-model-name=m",
           "--gateway-arg=--poll-interval=0.2", "--gateway-arg=--slo-ttft-ms=0.001",
           "--gateway-arg=--slo-itl-ms=100000", "--gateway-arg=--planner-interval=3",
           "--gateway-arg=--planner-cooldown=20", "--gateway-arg=--planner-min-samples=3"]
    up = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_CLUSTER_SECRET=SECRET),
                          start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: roles(base) == [("decode", True, False)] * 2 + [("prefill", True, False)],
                 200, "the cluster")
        first = complete(base)
        assert first.status_code == 200
        want = first.json()["choices"][0]["text"]
        answers: list[tuple[int, str, str, str]] = []   # status, text, x-tandem-prefill, x-tandem-decode
        stop = threading.Event()

        def client():
            while not stop.is_set():
                r = complete(base)
                answers.append((r.status_code, r.json()["choices"][0]["text"] if r.status_code == 200
                                else r.text, r.headers.get("x-tandem-prefill", ""),
                                r.headers.get("x-tandem-decode", "")))

        def served_whole_by_both() -> bool:
            ws = httpx.get(base + "/internal/workers", headers=INTERNAL, timeout=5).json()["workers"]
            both = [w["url"] for w in ws if w["role"] == "both"]
            return bool(both) and any(p == d == both[0] for _, _, p, d in answers)

        t = threading.Thread(target=client)
        t.start()
        try:
            wait_for(lambda: roles(base) == [("both", True, False), ("decode", True, False),
                                              ("prefill", True, False)], 150, "the switch to both")
            wait_for(served_whole_by_both, 60, "a request served whole by the both worker")
            wait_for(lambda: roles(base) == [("decode", True, False)] + [("prefill", True, False)] * 2,
                     150, "the switch to prefill")
            n = len(answers)
            wait_for(lambda: len(answers) >= n + 2, 60, "requests after the switches")
        finally:
            stop.set()
            t.join(60)
        assert answers and all(a[:2] == (200, want) for a in answers), \
            [a for a in answers if a[:2] != (200, want)][:3]
        planner = httpx.get(base + "/internal/planner", headers=INTERNAL, timeout=5).json()
        assert planner["seq"] == 2 and planner["switch"]["from_role"] == "both" \
            and planner["switch"]["to_role"] == "prefill"
        assert up.poll() is None
    finally:
        stop_up(up)
        log.close()
    text = (tmp_path / "up.log").read_text()
    assert "to switch it decode -> both (ttft)" in text and "restarted as both" in text, text[-2000:]
    assert "to switch it both -> prefill (ttft)" in text and "restarted as prefill" in text, text[-2000:]
    assert "exited with code" not in text   # the deliberate stop is no death to the supervisor
