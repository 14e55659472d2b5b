"""Run a `mooncake_master` (the store's metadata server) on this host: for `tandem up --kv-store
auto` and the tests. Its RPC port is the store's address (`mooncake://HOST:PORT`); clients reach
each other peer to peer (P2PHANDSHAKE), so no HTTP metadata server is started."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tandem.ports import free_port


def master_binary() -> str:
    """The `mooncake_master` shipped with the Mooncake wheel (next to this Python, or on PATH)."""
    here = Path(sys.executable).parent / "mooncake_master"
    found = str(here) if here.exists() else shutil.which("mooncake_master")
    if found is None:
        raise FileNotFoundError("mooncake_master not found: install the wheel mooncake-transfer-engine-non-cuda "
                                "(CPU) or mooncake-transfer-engine (CUDA)")
    return found


@dataclass
class MasterProcess:
    host: str
    port: int
    proc: subprocess.Popen
    cmd: tuple[str, ...]

    @property
    def url(self) -> str:
        return f"mooncake://{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def restart(self, ready_timeout_s: float = 15.0) -> None:
        """Start it again on the same ports (after stop or kill): an empty store."""
        self.stop()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.host, self.port, self.proc, ready_timeout_s)


def master_command(host: str = "127.0.0.1", port: int = 0,
                   extra: tuple[str, ...] = ()) -> tuple[int, tuple[str, ...]]:
    """(RPC port, command line) of a master on `host` (port 0: a free one; its metrics port is
    always a free one). The same ports on every start: a restarted master is found again."""
    port = port or free_port(host)
    return port, (master_binary(), f"--rpc_address={host}", f"--rpc_port={port}",
                  f"--metrics_host={host}", f"--metrics_port={free_port(host)}", *extra)


def start_master(host: str = "127.0.0.1", port: int = 0, ready_timeout_s: float = 15.0,
                 extra: tuple[str, ...] = ()) -> MasterProcess:
    """Start a master on `host` (port 0: a free one) and wait until it accepts connections."""
    port, cmd = master_command(host, port, extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(host, port, proc, ready_timeout_s)
    return MasterProcess(host, port, proc, cmd)


def wait_listening(host: str, port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    """Return once `host:port` accepts a TCP connection; RuntimeError if `proc` exits first,
    TimeoutError (and `proc` killed) past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"mooncake_master exited with code {proc.returncode} at start")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"mooncake_master did not listen on {host}:{port} within {timeout_s:.0f} s")
            time.sleep(0.05)
