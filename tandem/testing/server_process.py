"""A `tandem serve` (or any HTTP server) subprocess: wait until it is healthy, stop it; a
`tandem up` cluster the same way.

Used by tests and benchmark scripts that start servers; every wait is bounded in time and
notices a server that exited instead of becoming healthy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Callable

import httpx


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 120.0, poll_s: float = 0.3,
                 describe: Callable[[], str] = lambda: "") -> None:
    """Return once GET {url}/health answers 200. Raises RuntimeError if `proc` exits first and
    TimeoutError after `timeout_s`; both messages end with `describe()` (e.g. the log's tail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with code {proc.returncode}\n{describe()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}: not healthy after {timeout_s:.0f} s\n{describe()}")
        time.sleep(poll_s)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 15.0) -> None:
    """Send `sig`, wait up to `grace_s`, then SIGKILL (its process group when it leads one)."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        try:
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.wait(10)


@contextlib.contextmanager
def tandem_up(args: list[str], cwd: str | os.PathLike, env: dict,
              lines: list[str] | None = None) -> Iterator[subprocess.Popen]:
    """`tandem up ARGS` (give it --ready-timeout): yields once it prints that it is ready; stops it
    as Ctrl-C does (SIGINT, then SIGKILL after 60 s). Raises AssertionError if it exits first.
    `lines` receives what it printed until then (each child's name and URL)."""
    proc = subprocess.Popen([sys.executable, "-m", "tandem.cli", "up", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:
            if lines is not None:
                lines.append(line)
            if "ready at" in line:
                break
        assert proc.poll() is None, "tandem up exited"
        yield proc
    finally:
        stop(proc, signal.SIGINT, 60.0)
