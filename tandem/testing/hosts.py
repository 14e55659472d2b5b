"""tandem's processes on test hosts (tandem/testing/netns.py): gateways, workers, a
mooncake_master, Redis and relays, each in the namespace of its host, bound to that host's address.

    with Network.open() as net, HostCluster(net, tmp_path, model) as c:
        p0, d0, g0 = net.add_host("p0"), net.add_host("d0"), net.add_host("gw0")
        c.worker("p0", p0, "prefill")
        c.worker("d0", d0, "decode")
        c.gateway("gw0", g0, prefill=[c.url("p0")], decode=[c.url("d0")])
        c.wait_ready()
        ...                                  # requests to c.url("gw0")
        c.check_addresses()                  # nothing listens on or dials a loopback address
    # every process stopped (SIGTERM, then SIGKILL), then the network removed

Each process logs to WORKDIR/NAME.log; a process that exits while being waited for fails with the
tail of its log. Every wait is bounded. Processes get PR_SET_PDEATHSIG, so none outlives the test
process, and run in their own process group.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tandem.launcher.role_commands import (GATEWAY_PORT, KV_PORT, MASTER_PORT, REDIS_PORT, WORKER_PORT,
                                          GatewayCommand, MasterCommand, RedisCommand, WorkerCommand)
from tandem.testing.netns import Host, Network, Socket, is_loopback

REPO = Path(__file__).resolve().parents[2]
# every host has its own port space: the fixed ports of tandem/launcher/role_commands.py
__all__ = ["GATEWAY_PORT", "KV_PORT", "MASTER_PORT", "REDIS_PORT", "WORKER_PORT", "HostCluster", "HostProc"]
TANDEM = (sys.executable, "-m", "tandem.cli")
WORKER_ARGS = ("--kv-cache-memory", "16MiB", "--dtype", "float32", "--device", "cpu",
               "--served-model-name", "m", "--threads", "1", "--no-queue")
_PR_SET_PDEATHSIG = 1


@dataclass
class HostProc:
    name: str
    host: Host
    argv: list[str]
    proc: subprocess.Popen
    log: Path
    url: str | None = None            # its HTTP base URL, if it serves HTTP
    kind: str = "other"               # worker | gateway | master | redis | relay | other
    role: str | None = None           # a worker's role
    wildcard_ok: str | None = None    # why it may listen on a wildcard address (None: it may not)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def describe(self) -> str:
        state = "running" if self.alive() else f"exited with {self.proc.returncode}"
        return f"{self.name} on {self.host.name} ({self.host.addr}), {state}; log tail:\n{self.tail()}"


def _child_setup() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class HostCluster:
    net: Network
    workdir: Path
    model: str
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    procs: dict[str, HostProc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.env = {**self.env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}

    def __enter__(self) -> "HostCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- starting -------------------------------------------------------------------------------
    def start(self, name: str, host: Host, argv: list[str], *, url: str | None = None,
              kind: str = "other", role: str | None = None, wildcard_ok: str | None = None) -> HostProc:
        if name in self.procs and self.procs[name].alive():
            raise ValueError(f"{name} is running")
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            out.write(f"\n--- {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            proc = subprocess.Popen(self.net.argv(host, argv), env=self.env, cwd=REPO, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    process_group=0, preexec_fn=_child_setup)
        p = HostProc(name, host, argv, proc, log, url, kind, role, wildcard_ok)
        self.procs[name] = p
        return p

    def worker(self, name: str, host: Host, role: str, *, gateway: str | None = None,
               transport: str | None = "tcp", port: int = WORKER_PORT, extra: Iterable[str] = ()
               ) -> HostProc:
        """`tandem serve` bound to the host's address; with `gateway`, it registers there. Its KV
        transfer control server listens on KV_PORT (and advertises the host's address)."""
        cmd = WorkerCommand(model=self.model, role=role, host=host.addr, port=port, gateway=gateway,
                            kv_transport=transport, log_level="warning", options=WORKER_ARGS)
        argv = [*TANDEM, *cmd.argv(), *extra]
        # Mooncake (transfer engine and store client) listens on every interface of the host
        # (its own choice, tandem cannot narrow it); what it advertises is the host's address
        mooncake = transport == "mooncake" or any(a == "--kv-store" or a.startswith("--kv-store=")
                                                  for a in argv)
        return self.start(name, host, argv, url=host.url(port), kind="worker", role=role,
                          wildcard_ok="Mooncake's listeners bind every interface" if mooncake else None)

    def gateway(self, name: str, host: Host, *, prefill: Iterable[str] = (), decode: Iterable[str] = (),
                workers: Iterable[str] = (), port: int = GATEWAY_PORT, extra: Iterable[str] = ()
                ) -> HostProc:
        cmd = GatewayCommand(model=self.model, host=host.addr, port=port, served_model_name="m",
                             prefill=tuple(prefill), decode=tuple(decode), workers=tuple(workers),
                             log_level="warning", options=tuple(extra))
        return self.start(name, host, [*TANDEM, *cmd.argv()], url=host.url(port), kind="gateway")

    def master(self, name: str, host: Host, port: int = MASTER_PORT) -> HostProc:
        """A mooncake_master (the store's metadata server) on the host's address."""
        from_venv = Path(sys.executable).parent / "mooncake_master"
        binary = str(from_venv) if from_venv.exists() else "mooncake_master"
        argv = [binary, *MasterCommand(host=host.addr, port=port).argv()]
        return self.start(name, host, argv, kind="master",
                          wildcard_ok="mooncake_master's RPC server binds every interface")

    def redis(self, name: str, host: Host, port: int = REDIS_PORT) -> HostProc:
        d = self.workdir / f"{name}-data"
        d.mkdir(exist_ok=True)
        argv = ["redis-server", *RedisCommand(host=host.addr, data_dir=str(d), port=port).argv()]
        return self.start(name, host, argv, kind="redis")

    def relay(self, name: str, host: Host, port: int, to: tuple[str, int], *, delay_ms: float = 0,
              loss: float = 0.0, reset_first: int = 0, reset_after: int = 0) -> HostProc:
        argv = [sys.executable, "-m", "tandem.testing.relay", "--listen", f"{host.addr}:{port}",
                "--to", f"{to[0]}:{to[1]}", "--delay-ms", str(delay_ms), "--loss", str(loss),
                "--reset-first", str(reset_first), "--reset-after", str(reset_after)]
        return self.start(name, host, argv, kind="relay")

    # --- waiting --------------------------------------------------------------------------------
    def url(self, name: str) -> str:
        u = self.procs[name].url
        assert u is not None, f"{name} serves no HTTP"
        return u

    def wait_until(self, what: str, check: Callable[[], bool], timeout_s: float,
                   watch: Iterable[str] | None = None, poll_s: float = 0.1) -> float:
        """Poll `check` until true; returns the seconds it took. Fails when a watched process
        (default: all) exits, or after `timeout_s`, with their log tails."""
        t0 = time.monotonic()
        names = list(self.procs) if watch is None else list(watch)
        while True:
            for n in names:
                p = self.procs[n]
                if not p.alive():
                    raise AssertionError(f"waiting for {what}: {p.describe()}")
            try:
                if check():
                    return time.monotonic() - t0
            except (httpx.HTTPError, OSError, ValueError, KeyError):
                pass
            if time.monotonic() - t0 > timeout_s:
                raise AssertionError(f"{what}: not after {timeout_s:.0f} s\n" + "\n".join(
                    self.procs[n].describe() for n in names))
            time.sleep(poll_s)

    def healthy(self, name: str) -> bool:
        return httpx.get(self.url(name) + "/health", timeout=2).status_code == 200

    def workers_seen(self, gateway: str) -> list[dict]:
        return httpx.get(self.url(gateway) + "/internal/workers", timeout=5).json()["workers"]

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Every worker answers /health, every gateway sees all its workers healthy, every
        master and Redis accept connections."""
        for p in list(self.procs.values()):
            if not p.alive():
                raise AssertionError(p.describe())
            if p.kind == "worker":
                self.wait_until(f"{p.name} healthy", lambda p=p: self.healthy(p.name), timeout_s)
            elif p.kind in ("master", "redis", "relay"):
                self.wait_until(f"{p.name} listening", lambda p=p: bool(self.listening(p.name)), timeout_s)
        for p in self.procs.values():
            if p.kind == "gateway":
                self.wait_until(f"{p.name} sees its workers healthy", lambda p=p: self.healthy(p.name) and all(
                    w["healthy"] for w in self.workers_seen(p.name)), timeout_s)

    # --- stopping -------------------------------------------------------------------------------
    def send(self, name: str, sig: int) -> None:
        p = self.procs[name]
        if p.alive():
            p.proc.send_signal(sig)

    def stop(self, name: str, sig: int = signal.SIGTERM, grace_s: float = 15.0) -> int:
        """Signal, wait up to `grace_s`, then SIGKILL its process group; returns the exit code."""
        p = self.procs[name]
        if p.alive():
            p.proc.send_signal(sig)
            try:
                p.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.proc.wait(10)
        return p.proc.returncode

    def close(self) -> None:
        """Stop every process, gateways first (SIGTERM, SIGKILL after 10 s)."""
        order = sorted(self.procs.values(), key=lambda p: p.kind != "gateway")
        for p in order:
            if p.alive():
                p.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in order:
            try:
                p.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.proc.wait(10)

    # --- the loopback rule ----------------------------------------------------------------------
    def listening(self, name: str) -> list[Socket]:
        p = self.procs[name]
        return [s for s in self.net.sockets(p.host, listening=True) if p.proc.pid in s.pids]

    def check_addresses(self) -> None:
        """No process listens on or talks to a loopback address, and none listens on a wildcard
        address unless it says why (Mooncake); what workers advertise (their registration at a
        gateway, their KV transport address) is their own host's address. Raises AssertionError
        listing every violation."""
        bad: list[str] = []
        by_host: dict[str, list[HostProc]] = {}
        for p in self.procs.values():
            if p.alive():
                by_host.setdefault(p.host.name, []).append(p)
        for procs in by_host.values():
            host = procs[0].host
            listening = self.net.sockets(host, listening=True)
            connected = self.net.sockets(host, listening=False)
            for s in listening:
                owner = ", ".join(p.name for p in procs if p.proc.pid in s.pids) or s.process
                if is_loopback(s.local):
                    bad.append(f"{host.name}: {owner} listens on loopback {s.local}:{s.port}")
                elif s.local in ("0.0.0.0", "::", "*"):
                    if not any(p.proc.pid in s.pids and p.wildcard_ok for p in procs):
                        bad.append(f"{host.name}: {owner} listens on every interface (:{s.port})")
                elif s.local != host.addr:
                    bad.append(f"{host.name}: {owner} listens on {s.local}:{s.port}, not {host.addr}")
            for s in connected:
                if is_loopback(s.local) or is_loopback(s.peer):
                    owner = ", ".join(p.name for p in procs if p.proc.pid in s.pids) or s.process
                    bad.append(f"{host.name}: {owner} has a loopback connection "
                               f"{s.local}:{s.port} -> {s.peer}:{s.peer_port}")
        for p in self.procs.values():
            if not p.alive():
                continue
            if p.kind == "gateway":
                for w in self.workers_seen(p.name):
                    if not any(w["url"] == q.url for q in self.procs.values() if q.kind == "worker"):
                        bad.append(f"{p.name} knows a worker at {w['url']}, which is no test host's")
            elif p.kind == "worker":
                stats = httpx.get(p.url + "/internal/stats", timeout=5).json()
                addr = stats.get("transport_address")
                if addr is not None and addr.rpartition(":")[0].strip("[]") not in self._advertisable(p):
                    bad.append(f"{p.name} advertises its KV at {addr}, not at {p.host.addr}")
        assert not bad, "addresses that leave the test hosts' network:\n" + "\n".join(bad)

    def _advertisable(self, p: HostProc) -> set[str]:
        """Addresses a worker may advertise: its own, or a relay's (--kv-advertise-host)."""
        ok = {p.host.addr}
        if "--kv-advertise-host" in p.argv:
            ok.add(p.argv[p.argv.index("--kv-advertise-host") + 1])
        return ok
