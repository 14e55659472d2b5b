"""`tandem up --gateways 2`: two gateways behind tandem up's balancer on one port. One of them
killed with SIGKILL under load costs no request (the balancer sends a request its gateway did
not answer to the other one; clients do not retry), and `tandem up` restarts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tandem.launcher.cluster import free_port
from tests.e2e.test_up_supervision import SECRET, complete, wait_for, workers
from tests.e2e.up_process import child_pid, stop_up

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def test_kill_9_one_of_two_gateways_under_load(llama_dir, tmp_path):
    port = free_port()
    log_path = tmp_path / "up.log"
    log = open(log_path, "wb")
    cmd = [sys.executable, "-m", "tandem", "up", "--model", str(llama_dir), "--colocated", "1",
           "--gateways", "2", "--port", str(port), "--ready-timeout", "200", "--no-queue",
           "--worker-arg=--kv-cache-memory=16MiB", "--worker-arg=--dtype=float32",
           "--worker-arg=--served-model-name=m", "--gateway-arg=--served-model-name=m"]
    up = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_CLUSTER_SECRET=SECRET),
                          start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: "tandem up: ready at" in log_path.read_text(), 200, "the cluster")
        text = log_path.read_text()
        second = int(text.split("tandem up: gateway-1 at http://127.0.0.1:")[1].split()[0])
        # requests long enough that each gateway has one in flight most of the time
        want = complete(base, max_tokens=24).json()["choices"][0]["text"]

        answers: list[tuple[int, str]] = []
        stop = threading.Event()

        def client():   # a new connection per request, as test_up_supervision's client
            while not stop.is_set():
                try:
                    r = complete(base, max_tokens=24)
                    answers.append((r.status_code, r.json()["choices"][0]["text"] if r.status_code == 200
                                    else r.text))
                except httpx.HTTPError as exc:
                    answers.append((0, repr(exc)))

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: len(answers) >= 6, 60, "requests before the kill")
            # killed while it has a request in flight (which the balancer then sends again)
            pid = child_pid(up.pid, b"gateway", str(second).encode())
            wait_for(lambda: any(w["inflight_requests"] for w in workers(f"http://127.0.0.1:{second}").values()),
                     30, "a request in flight on gateway-1", poll_s=0.01)
            os.kill(pid, signal.SIGKILL)
            killed_at = len(answers)
            wait_for(lambda: "gateway-1 restarted (restart 1)" in log_path.read_text(), 60,
                     "the gateway's restart")
            wait_for(lambda: httpx.get(f"http://127.0.0.1:{second}/health", timeout=5).status_code == 200,
                     120, "the restarted gateway ready")
            wait_for(lambda: len(answers) >= killed_at + 10, 60, "requests after the restart")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert all(a == (200, want) for a in answers), [a for a in answers if a != (200, want)][:3]
        assert up.poll() is None
    finally:
        stop_up(up)
        log.close()
    text = log_path.read_text()
    # what that gateway had in flight was most likely sent again (its last request may have
    # been answered between the look and the kill; tests/launcher/test_balancer.py checks replays)
    print(f"requests sent again by the balancer: {text.count('went away before answering')}")
    assert "gateway-1 exited with code -9; restarting in 1.0s (restart 1)" in text, text[-2000:]
