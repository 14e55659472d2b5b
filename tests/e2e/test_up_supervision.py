"""`tandem up` supervision end to end: kill -9 the prefill worker of `tandem up --prefill 1 --decode 1`
while a client keeps sending; every request succeeds with the same greedy text (the decode worker
serves whole requests while the prefill pool is empty, and the gateway's /health stays 200 since
it can serve), `tandem up` restarts the worker, the gateway counts the new instance and routes
prefill -> decode again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tandem import cluster_secret
from tandem.launcher.cluster import free_port
from tests.e2e.up_process import child_pid, stop_up

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The quick brown fox jumps over the lazy dog. " * 3
SECRET = "e2e-cluster-secret"   # given to tandem up (TANDEM_CLUSTER_SECRET) to call /internal routes
INTERNAL = cluster_secret.headers(SECRET)


def complete(base: str, max_tokens: int = 8, prompt: str = PROMPT) -> httpx.Response:
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    return httpx.post(base + "/v1/completions", json=body, timeout=60)


def workers(base: str) -> dict[str, dict]:
    return {w["role"]: w for w in httpx.get(base + "/internal/workers", headers=INTERNAL,
                                             timeout=5).json()["workers"]}


def wait_for(cond, timeout_s: float, what: str, poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if cond():
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


def metric(base: str, name: str, worker: str) -> float:
    for line in httpx.get(base + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name) and f'worker="{worker}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_kill_9_prefill_worker_under_tandem_up(llama_dir, tmp_path):
    port = free_port()
    log_path = tmp_path / "up.log"
    log = open(log_path, "wb")
    cmd = [sys.executable, "-m", "tandem", "up", "--model", str(llama_dir), "--prefill", "1",
           "--decode", "1", "--port", str(port), "--ready-timeout", "200",
           "--worker-arg=--kv-cache-memory=16MiB", "--worker-arg=--dtype=float32",
           "--worker-arg=--served-model-name=m", "--gateway-arg=--served-model-name=m",
           "--gateway-arg=--poll-interval=0.2", "--gateway-arg=--unhealthy-after=2"]
    up = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_CLUSTER_SECRET=SECRET),
                          start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: all(w["healthy"] for w in workers(base).values()) and len(workers(base)) == 2,
                 200, "the cluster")
        # supervision starts once tandem up itself saw the cluster ready (a death before is fatal)
        wait_for(lambda: "tandem up: ready at" in log_path.read_text(), 60, "tandem up's ready line")
        prefill_url = workers(base)["prefill"]["url"]
        first = complete(base)
        assert first.status_code == 200
        assert first.headers["x-tandem-prefill"] == prefill_url
        want = first.json()["choices"][0]["text"]

        answers: list[tuple[int, str]] = []
        finished_at: list[float] = []
        stop = threading.Event()

        def client():
            while not stop.is_set():
                r = complete(base)
                answers.append((r.status_code, r.json()["choices"][0]["text"] if r.status_code == 200
                                else r.text))
                finished_at.append(time.monotonic())

        health: list[tuple[int, dict]] = []   # /health while the prefill pool restarts

        def prober():
            while not stop.is_set():
                r = httpx.get(base + "/health", timeout=10)
                health.append((r.status_code, r.json()))
                time.sleep(0.1)

        t = threading.Thread(target=client)
        t.start()
        probe = threading.Thread(target=prober)
        probe.start()
        try:
            wait_for(lambda: len(answers) >= 2, 60, "requests before the kill")
            os.kill(child_pid(up.pid, b"serve", b"prefill"), signal.SIGKILL)
            killed_at, kill_time = len(answers), time.monotonic()
            # the worker comes back: a new instance, healthy, counted by the gateway
            wait_for(lambda: metric(base, "tandem:gateway_worker_restarts", prefill_url) == 1
                     and workers(base)["prefill"]["healthy"], 120, "the prefill worker's restart")
            back_time = time.monotonic()
            wait_for(lambda: len(answers) >= killed_at + 3, 60, "requests after the restart")
        finally:
            stop.set()
            t.join(60)
            probe.join(30)
        # readiness: the gateway could serve throughout, so /health never said otherwise, and
        # its body showed the prefill pool empty while the decode pool served whole requests
        assert health and all(code == 200 for code, _ in health), [h for h in health if h[0] != 200][:3]
        assert any(body["mode"] == "decode" and body["pools"]["prefill"]["healthy"] == 0
                   for _, body in health), health[:3]
        assert len(answers) > killed_at
        # requests were answered while the prefill worker was down
        assert any(kill_time < t < back_time for t in finished_at), (kill_time, back_time, finished_at)
        assert all(a == (200, want) for a in answers), [a for a in answers if a != (200, want)][:3]
        # a prompt neither worker has cached, both idle: prefill -> decode again (the decode
        # worker holds PROMPT now, so the placement policy would serve PROMPT there whole)
        again = complete(base, prompt="A new prompt about something else entirely. " * 3)
        assert again.status_code == 200
        assert again.headers["x-tandem-prefill"] == prefill_url != again.headers["x-tandem-decode"]
        assert up.poll() is None   # tandem up, the gateway and the decode worker stayed up
    finally:
        stop_up(up)
        log.close()
    text = (tmp_path / "up.log").read_text()
    assert "prefill-0 exited with code -9; restarting in 1.0s (restart 1)" in text, text[-2000:]
    assert "prefill-0 restarted (restart 1)" in text
