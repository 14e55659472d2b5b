"""`tandem up --kv-store auto` supervises its mooncake_master like a worker: killed with
SIGKILL it is reaped (no zombie) and restarted on the same port while the worker keeps serving;
and when `tandem up` itself is killed with SIGKILL, no child (master, worker, gateway) is left
listening (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tandem.launcher.cluster import free_port
from tests.e2e.test_up_supervision import SECRET, complete, wait_for, workers
from tests.e2e.up_process import stop_up

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def children(parent: int) -> dict[int, list[bytes]]:
    """pid -> command line of `parent`'s children (from /proc), zombies included."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == parent:
                    out[int(entry.name)] = (entry / "cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
    return out


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def test_master_restarted_and_nothing_outlives_a_killed_tandem_up(llama_dir, tmp_path):
    port = free_port()
    log_path = tmp_path / "up.log"
    log = open(log_path, "wb")
    cmd = [sys.executable, "-m", "tandem", "up", "--model", str(llama_dir), "--colocated", "1",
           "--port", str(port), "--ready-timeout", "200", "--kv-store", "auto",
           "--worker-arg=--kv-cache-memory=16MiB", "--worker-arg=--dtype=float32",
           "--worker-arg=--kv-host-memory=4MiB", "--worker-arg=--kv-tier-no-cost-check",
           "--worker-arg=--served-model-name=m", "--gateway-arg=--served-model-name=m"]
    up = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), TANDEM_CLUSTER_SECRET=SECRET),
                          start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    ports: list[int] = [port]
    kids: dict[int, list[bytes]] = {}   # every child seen, to kill what a failure leaves behind
    try:
        wait_for(lambda: len(workers(base)) == 1 and all(w["healthy"] for w in workers(base).values()),
                 200, "the cluster")
        # supervision starts once tandem up itself saw the cluster ready (a death before is fatal)
        wait_for(lambda: "tandem up: ready at" in log_path.read_text(), 60, "tandem up's ready line")
        ports.append(int(workers(base)["both"]["url"].rsplit(":", 1)[1]))
        master_port = int(log_path.read_text().split("mooncake_master at mooncake://127.0.0.1:")[1].split()[0])
        ports.append(master_port)
        want = complete(base).json()["choices"][0]["text"]
        kids.update(children(up.pid))
        master = next(pid for pid, c in kids.items() if b"mooncake_master" in c[0])

        os.kill(master, signal.SIGKILL)
        # reaped (not left defunct) and started again on the same port
        wait_for(lambda: state(master) == "gone", 30, "the killed master reaped")
        wait_for(lambda: "mooncake_master restarted (restart 1)" in log_path.read_text(), 30,
                 "the master's restart")
        wait_for(lambda: listening(master_port), 30, "the restarted master listening")
        again = next(pid for pid, c in children(up.pid).items() if b"mooncake_master" in c[0])
        assert again != master
        for _ in range(3):   # the worker kept serving, through its store's restart
            r = complete(base)
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == want
        assert httpx.get(base + "/health", timeout=5).status_code == 200

        kids.update(children(up.pid))
        os.kill(up.pid, signal.SIGKILL)
        up.wait(10)
        # every child got SIGTERM from the kernel: none is left listening (the worker drains first)
        wait_for(lambda: not any(listening(p) for p in ports), 60, f"no child listening on {ports}")
        wait_for(lambda: all(state(pid) in ("gone", "Z") for pid in kids), 30, "every child ended")
    finally:
        stop_up(up)
        for pid, c in kids.items():
            if state(pid) not in ("gone", "Z") and Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") == c:
                os.kill(pid, signal.SIGKILL)
        log.close()
    text = log_path.read_text()
    assert "mooncake_master exited with code -9; restarting in 1.0s (restart 1)" in text, text[-2000:]
