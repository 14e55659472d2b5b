"""`tandem up`'s children (tandem/launcher/cluster.py) with real processes: the store child is
waited for by its TCP port and stopped after the others, and no child outlives a supervisor
killed with SIGKILL (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port

ROOT = Path(__file__).resolve().parents[2]
LISTEN = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
time.sleep(float(sys.argv[2])); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
while True: s.accept()[0].close()
"""
# a stand-in for `tandem up`: starts a store child and a worker-like child, prints their pids
PARENT = """
import json, sys
from tandem.launcher.cluster import LocalCluster, ProcSpec
listen, port = sys.argv[1], int(sys.argv[2])
c = LocalCluster([ProcSpec("store", (sys.executable, "-c", listen, str(port), "0"),
                           f"mooncake://127.0.0.1:{port}", None, kind="store"),
                  ProcSpec("w", (sys.executable, "-c", "import time; time.sleep(600)"), "http://x", None, "both")])
c.start()
print(json.dumps({n: p.pid for n, p in c.running.items()}), flush=True)
import time; time.sleep(600)
"""


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def gone(pid: int) -> bool:
    """Ended (a zombie waiting for init to reap it counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_store_child_is_ready_once_it_listens_and_stops_with_the_cluster():
    port = free_port()
    store = ProcSpec("store", (sys.executable, "-c", LISTEN, str(port), "0.5"),
                     f"mooncake://127.0.0.1:{port}", None, kind="store")
    c = LocalCluster([store])
    c.start()
    try:
        c.wait_ready(30)          # waits through the child's 0.5 s before it binds
        assert listening(port)
        proc = c.running["store"]
    finally:
        c.stop()
    assert proc.poll() is not None and not listening(port)


def test_no_child_outlives_a_supervisor_killed_with_sigkill():
    port = free_port()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, LISTEN, str(port)], stdout=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True)
    pids: dict[str, int] = {}
    try:
        pids = json.loads(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while not listening(port):
            assert time.monotonic() < deadline, "the store child never listened"
            time.sleep(0.1)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while not all(gone(pid) for pid in pids.values()) or listening(port):
            assert time.monotonic() < deadline, f"children left after their parent died: {pids}"
            time.sleep(0.1)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        for pid in pids.values():
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
