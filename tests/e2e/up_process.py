"""A `tandem up` process in e2e tests: its children found from /proc, and its bounded stop."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def child_pid(parent: int, *words: bytes) -> int:
    """The pid of `parent`'s child whose command line holds every one of `words`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and all(w in cmd for w in words):
            return int(entry.name)
    raise AssertionError(f"no child of {parent} with {words}")


def stop_up(up: subprocess.Popen) -> None:
    """Ctrl-C, as a user stops it; its process group killed if it has not ended within 60 s."""
    if up.poll() is not None:
        return
    up.send_signal(signal.SIGINT)
    try:
        up.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait(10)
