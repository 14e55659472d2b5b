"""A local cluster as child processes: `tandem up`, and the e2e tests.

Each worker is `python -m tandem.cli serve --role R --threads K`, pinned (sched_setaffinity,
before exec) to its share of this process's cores; the gateway is one more child, unpinned; with
`--kv-store auto` the Mooncake master is one more (kind "store": started first, on fixed ports,
stopped last). Children run in their own process group so a terminal Ctrl-C reaches only this
supervisor, which then stops them in order (SIGTERM, then SIGKILL after a grace period). On Linux
each child also gets SIGTERM if the supervisor dies, even by SIGKILL (PR_SET_PDEATHSIG, set
between fork and exec; a child whose parent died before that exits at once), so nothing
outlives it. Once the cluster is ready, a child that dies (the master too) is reaped and
restarted with backoff (tandem/launcher/supervisor.py).

The cluster secret (tandem/cluster_secret.py): `tandem up` generates one per run unless it was
given one, hands it to every child in its environment (TANDEM_CLUSTER_SECRET: not on the command
line, where `ps` shows it), and presents it itself in its readiness probe and role switches. A
child that refuses it (a --gateway-arg or --worker-arg gave it another) stops the start at once.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from tandem import cluster_secret
from tandem.kvstore.master import master_command, wait_listening
from tandem.launcher.balancer import BalancerConfig, BalancerThread
from tandem.launcher.proc_spec import ProcSpec
from tandem.launcher.role_switch import RoleSwitcher
from tandem.launcher.supervisor import RestartPolicy, Supervisor
from tandem.ports import free_port

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ClusterSpec:
    model: str
    prefill: int = 0
    decode: int = 0
    colocated: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    policy: str = "default"
    worker_args: tuple[str, ...] = ()    # extra `tandem serve` arguments for every worker
    # `tandem serve` arguments per role ("prefill", "decode", "both"; a profile's), placed before
    # worker_args so that an explicit flag wins
    role_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    gateway_args: tuple[str, ...] = ()   # extra `tandem gateway` arguments
    ready_timeout_s: float = 600.0
    log_level: str = "warning"
    # Mooncake Store for every worker's KV tiers: None (off), "auto" (this supervisor starts a
    # mooncake_master on 127.0.0.1 with free ports and stops it) or mooncake://HOST:PORT
    kv_store: str | None = None
    restart: RestartPolicy = field(default_factory=RestartPolicy)  # after start-up, dead children
    # gateways: 1 listens on `port` itself; N > 1 listen on free ports behind a balancer on `port`
    # (tandem/launcher/balancer.py), named "gateway", "gateway-1", ...; the first one drives
    # the planner's role switches
    gateways: int = 1
    # the credential of /internal routes, for every child; None: run_cluster generates one
    cluster_secret: str | None = field(default=None, repr=False)


# printed once every worker is healthy (the gateway's /health answers 200 as soon as one is)
READY_LINE = "tandem up: ready at"


def plan_cores(cores: list[int], n: int) -> list[tuple[int, ...]]:
    """Split `cores` into n shares: contiguous equal chunks (the remainder to the first ones)
    when there are enough, else one core each, round robin."""
    if n <= 0:
        return []
    if len(cores) < n:
        return [(cores[i % len(cores)],) for i in range(n)]
    base, extra = divmod(len(cores), n)
    shares, i = [], 0
    for k in range(n):
        size = base + (1 if k < extra else 0)
        shares.append(tuple(cores[i:i + size]))
        i += size
    return shares


def worker_proc(name: str, model: str, role: str, host: str, port: int, cores: tuple[int, ...] | None,
                extra: tuple[str, ...] = (), log_level: str = "warning") -> ProcSpec:
    threads = len(cores) if cores else 1
    # the cluster's queue is the gateway's: a worker serves none (its own would be a second one)
    cmd = (sys.executable, "-m", "tandem.cli", "serve", "--model", model, "--role", role,
           "--host", host, "--port", str(port), "--threads", str(threads),
           "--log-level", log_level, "--no-queue", *extra)
    return ProcSpec(name, cmd, f"http://{host}:{port}", cores, role)


def gateway_proc(model: str, host: str, port: int, workers: list[ProcSpec], policy: str,
                 extra: tuple[str, ...] = (), log_level: str = "warning",
                 name: str = "gateway") -> ProcSpec:
    cmd = [sys.executable, "-m", "tandem.cli", "gateway", "--model", model, "--host", host,
           "--port", str(port), "--policy", policy, "--log-level", log_level]
    for w in workers:
        flag = {"prefill": "--prefill", "decode": "--decode"}.get(w.role or "", "--worker")
        cmd += [flag, w.url]
    return ProcSpec(name, (*cmd, *extra), f"http://{host}:{port}", None)


def worker_args_for(spec: ClusterSpec, role: str) -> tuple[str, ...]:
    return (*spec.role_args.get(role, ()), *spec.worker_args)


def as_role(spec: ClusterSpec, proc: ProcSpec, role: str) -> ProcSpec:
    """The same worker (name, port, cores) started as `role`, with that role's arguments."""
    port = int(proc.url.rsplit(":", 1)[1])
    return worker_proc(proc.name, spec.model, role, spec.host, port, proc.cores,
                       worker_args_for(spec, role), spec.log_level)


def plan(spec: ClusterSpec) -> list[ProcSpec]:
    """Workers first, then the gateway (which starts last and polls them)."""
    roles = ["prefill"] * spec.prefill + ["decode"] * spec.decode + ["both"] * spec.colocated
    shares = plan_cores(sorted(os.sched_getaffinity(0)), len(roles))
    taken = {spec.port}
    procs = []
    for i, (role, cores) in enumerate(zip(roles, shares)):
        port = free_port(spec.host, taken)
        taken.add(port)
        procs.append(worker_proc(f"{role}-{i}", spec.model, role, spec.host, port, cores,
                                 worker_args_for(spec, role), spec.log_level))
    workers = list(procs)
    for i in range(spec.gateways):
        port = spec.port
        if spec.gateways > 1:   # behind the balancer, which listens on spec.port
            port = free_port(spec.host, taken)
            taken.add(port)
        procs.append(gateway_proc(spec.model, spec.host, port, workers, spec.policy, spec.gateway_args,
                                  spec.log_level, name="gateway" if i == 0 else f"gateway-{i}"))
    return procs


def start_balancer(spec: ClusterSpec, procs: list[ProcSpec]) -> BalancerThread | None:
    """With several gateways: the balancer on spec.host:spec.port in front of them."""
    if spec.gateways <= 1:
        return None
    ups = tuple((spec.host, int(p.url.rsplit(":", 1)[1])) for p in procs
                if p.kind == "server" and p.role is None)
    lb = BalancerThread(BalancerConfig(spec.host, spec.port, ups))
    lb.start()
    return lb


def master_proc(host: str = "127.0.0.1") -> ProcSpec:
    """The Mooncake master of `--kv-store auto`, on free ports chosen now (kept on restarts)."""
    port, cmd = master_command(host)
    return ProcSpec("mooncake_master", cmd, f"mooncake://{host}:{port}", None, kind="store")


def _child_setup(cores: tuple[int, ...] | None, parent: int) -> None:
    """Runs in the child between fork and exec: pin, and die with the parent."""
    if cores:
        os.sched_setaffinity(0, cores)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() != parent:   # the parent died before prctl: no signal will come
        os._exit(1)


@dataclass
class LocalCluster:
    procs: list[ProcSpec]
    env: dict[str, str] | None = None
    running: dict[str, subprocess.Popen] = field(default_factory=dict)
    # every child's TANDEM_CLUSTER_SECRET, and what the probes present; None: children get none
    # (not even one this process inherited), their /internal routes stay open
    cluster_secret: str | None = field(default=None, repr=False)

    def start(self, name: str | None = None) -> None:
        """Start every process (or one by name) that is not running."""
        env = dict(self.env or os.environ)
        env.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
        env.pop(cluster_secret.ENV_VAR, None)
        if self.cluster_secret is not None:
            env[cluster_secret.ENV_VAR] = self.cluster_secret
        me = os.getpid()
        for p in self.procs:
            if (name is None or p.name == name) and p.name not in self.running:
                out = subprocess.DEVNULL if p.kind == "store" else None
                self.running[p.name] = subprocess.Popen(
                    p.cmd, env=env, process_group=0, stdout=out, stderr=out,
                    preexec_fn=lambda cores=p.cores: _child_setup(cores, me))

    def spec(self, name: str) -> ProcSpec:
        return next(p for p in self.procs if p.name == name)

    def http_client(self, timeout_s: float = 2.0) -> httpx.Client:
        """A client presenting the cluster secret, for the children's /internal routes."""
        return httpx.Client(timeout=timeout_s, headers=cluster_secret.headers(self.cluster_secret))

    def wait_ready(self, timeout_s: float) -> None:
        """Every worker's /health answers 200 and its /internal/stats takes the cluster secret,
        then the gateway (its /internal/workers) sees them all healthy. RuntimeError at once
        when a child refuses the secret (401/403): waiting would not change that."""
        deadline = time.monotonic() + timeout_s
        with self.http_client() as client:
            for p in self.procs:
                if p.kind == "store":
                    self.wait_store(p, deadline)
                    continue
                paths = ["/internal/workers"] if p.role is None else ["/health", "/internal/stats"]
                while paths:
                    self.check_alive()
                    try:
                        r = client.get(p.url + paths[0])
                        if r.status_code in (401, 403):
                            raise RuntimeError(
                                f"{p.name} ({p.url}) refused this cluster's secret on {paths[0]} "
                                f"({r.status_code}): a --gateway-arg or --worker-arg gave it "
                                "another --cluster-secret; give tandem up the secret instead")
                        if r.status_code == 200 and (p.role is not None or all(
                                w["healthy"] for w in r.json()["workers"])):
                            paths.pop(0)
                            continue
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{p.name} ({p.url}) not ready after {timeout_s:.0f}s")
                    time.sleep(0.2)

    def wait_store(self, p: ProcSpec, deadline: float) -> None:
        """The master accepts TCP connections (the workers' store client connects at start)."""
        host, port = p.url.split("://", 1)[1].rsplit(":", 1)
        try:
            wait_listening(host, int(port), self.running[p.name], max(0.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            raise TimeoutError(f"{p.name} ({p.url}) not ready: {exc}") from None

    def check_alive(self) -> None:
        for name, code in self.exited().items():
            raise RuntimeError(f"{name} exited with code {code}")

    def exited(self) -> dict[str, int]:
        """Children that have ended, with their exit codes (negative: killed by that signal)."""
        return {name: proc.returncode for name, proc in self.running.items() if proc.poll() is not None}

    def forget(self, name: str) -> None:
        """Drop an ended child, so that `start(name)` starts it again."""
        self.running.pop(name, None)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.running.pop(name, None)
        if proc is None:
            return   # not running (it died; the supervisor may be about to restart it)
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM all (gateways first), wait, then SIGKILL what is left; the store (its clients
        are the workers) after the others have ended."""
        kinds = {p.name: p.kind for p in self.procs}
        store = {n: p for n, p in self.running.items() if kinds.get(n) == "store"}
        rest = {n: p for n, p in self.running.items() if n not in store}
        for group in (rest, store):
            self._stop_group(group, grace_s)
        self.running.clear()

    @staticmethod
    def _stop_group(group: dict[str, subprocess.Popen], grace_s: float) -> None:
        order = sorted(group.items(), key=lambda kv: not kv[0].startswith("gateway"))
        for _, proc in order:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, proc in order:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def kv_store_proc(spec: ClusterSpec) -> tuple[ClusterSpec, ProcSpec | None]:
    """`--kv-store`: with "auto", a mooncake_master on 127.0.0.1 (free ports) as one more child,
    to start first; every worker gets `--kv-store=URL`. Returns the spec to plan and the master's
    ProcSpec (or None)."""
    master = master_proc("127.0.0.1") if spec.kv_store == "auto" else None
    url = master.url if master is not None else spec.kv_store
    if url:
        spec = replace(spec, worker_args=(*spec.worker_args, f"--kv-store={url}"))
    return spec, master


def curl_line(url: str, model_name: str, keyed: bool = False) -> str:
    """`keyed`: the gateway wants an API key (the line names $API_KEY rather than print one)."""
    body = ('{"model": "%s", "messages": [{"role": "user", "content": "Hello!"}], '
            '"max_tokens": 32}' % model_name)
    auth = ' -H "Authorization: Bearer $API_KEY"' if keyed else ""
    return f"curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} -d '{body}'"


def run_cluster(spec: ClusterSpec) -> int:
    """`tandem up`: start, wait until ready, print a curl line, run until Ctrl-C or a child dies."""
    spec, master = kv_store_proc(spec)
    secret = spec.cluster_secret or secrets.token_urlsafe(32)   # a new one for each run
    cluster = LocalCluster([*([master] if master else []), *plan(spec)], cluster_secret=secret)
    stopping = False

    def on_signal(signum, frame):  # noqa: ARG001
        nonlocal stopping
        stopping = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    balancer = None
    try:
        balancer = start_balancer(spec, cluster.procs)   # refused connections until gateways listen
        if master is not None:   # listening before its clients start
            cluster.start(master.name)
            cluster.wait_store(master, time.monotonic() + 15.0)
        cluster.start()
        for p in cluster.procs:
            where = f" on cores {','.join(map(str, p.cores))}" if p.cores else ""
            print(f"tandem up: {p.name} at {p.url}{where}", flush=True)
        deadline = time.monotonic() + spec.ready_timeout_s
        ready = False
        while not stopping:
            try:
                cluster.wait_ready(min(1.0, max(0.0, deadline - time.monotonic())))
                ready = True
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
        if ready and not stopping:
            name = Path(spec.model).resolve().name
            gw = cluster.spec("gateway").url if balancer is None else f"http://{spec.host}:{spec.port}"
            if balancer is not None:
                print(f"tandem up: balancer at {gw} over {spec.gateways} gateways", flush=True)
            keyed = any(a == "--api-key" or a.startswith("--api-key=") for a in spec.gateway_args)
            print(f"{READY_LINE} {gw} (Ctrl-C stops everything). Try:\n\n"
                  f"  {curl_line(gw, name, keyed)}\n", flush=True)
        say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        supervisor = Supervisor(cluster, [p.name for p in cluster.procs], spec.restart, log=say)
        with cluster.http_client() as http:
            switcher = RoleSwitcher(cluster, cluster.spec("gateway").url,
                                    lambda url: http.get(url).raise_for_status().json(),
                                    lambda url, body: http.post(url, json=body).raise_for_status().json(),
                                    as_role=lambda proc, role: as_role(spec, proc, role), log=say,
                                    also_drain=tuple(p.url for p in cluster.procs if p.kind == "server"
                                                     and p.role is None and p.name != "gateway"))
            while not stopping:
                supervisor.step()
                switcher.step()   # the gateway planner's role switches (--slo-ttft-ms / --slo-itl-ms)
                time.sleep(0.2)
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"tandem up: {exc}; stopping", file=sys.stderr, flush=True)
        code = 1
    finally:
        print("tandem up: stopping", flush=True)
        if balancer is not None:
            balancer.stop()
        cluster.stop()   # the master after the workers, its clients
        for s, h in old.items():
            signal.signal(s, h)
    return code
