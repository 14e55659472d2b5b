"""The command line of each process of a tandem cluster, kept in one place: the multi-host test
harness (tandem/testing/hosts.py) starts exactly these, and the Kubernetes manifests
(deploy/kubernetes/, their `args` written by scripts/render-k8s-args.py and checked by
tests/deploy/test_kubernetes.py) run the same, so a pod cannot drift from what the tests run.

Each role is a frozen value of what differs between deployments (addresses, ports, the model,
sizing options); `argv()` is the argument list after the program (`TANDEM` for tandem's own
processes, `mooncake_master` and `redis-server` for the others). Pure: no I/O, no tandem imports.

Invariants every role keeps, on a test host as in a pod:
- a process binds `host`, the one address it is reached at (the host's own address; a pod's IP
  in Kubernetes, `$(POD_IP)`), never a wildcard or a loopback address;
- a worker advertises `host` to its gateway (its URL) and to other workers (its KV transfer
  server and Mooncake segments): `tandem serve` derives both from `--host`;
- secrets never appear on a command line: the cluster secret comes from $TANDEM_CLUSTER_SECRET.
"""

from __future__ import annotations

from dataclasses import dataclass

TANDEM = ("python", "-m", "tandem.cli")   # how an image runs tandem (the harness: sys.executable)
WORKER_PORT = 8100
GATEWAY_PORT = 8000
KV_PORT = 7100          # a worker's KV transfer control server
MASTER_PORT = 50051     # mooncake_master's RPC port; its metrics on the next port
REDIS_PORT = 6379
_QUEUE_FLAGS = ("--queue-url", "--queue-db")


@dataclass(frozen=True)
class WorkerCommand:
    """`tandem serve` for one worker (one rank group: --tensor-parallel-size ranks in one process)."""

    model: str
    role: str                          # prefill | decode | both
    host: str
    port: int = WORKER_PORT
    gateway: str | None = None         # register there (heartbeats; SIGTERM drains, then deregisters)
    kv_transport: str | None = "tcp"   # the PD handoff's transport; ignored for role both
    kv_port: int = KV_PORT
    kv_store: str | None = None        # mooncake://MASTER:PORT, the shared KV store
    log_level: str = "info"
    options: tuple[str, ...] = ()      # sizing and tuning (--device, --dtype, --kv-cache-memory ...)

    def argv(self) -> list[str]:
        a = ["serve", "--model", self.model, "--role", self.role, "--host", self.host,
             "--port", str(self.port), "--log-level", self.log_level, *self.options]
        if self.kv_transport is not None and self.role != "both":
            a += ["--kv-transport", self.kv_transport, "--kv-transfer-port", str(self.kv_port)]
        if self.kv_store is not None:
            a += ["--kv-store", self.kv_store]
        if self.gateway is not None:
            a += ["--gateway", self.gateway]
        return a


@dataclass(frozen=True)
class GatewayCommand:
    """`tandem gateway`: static workers by URL and/or workers that register themselves."""

    model: str
    host: str
    port: int = GATEWAY_PORT
    served_model_name: str | None = None
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()
    queue_url: str | None = None       # redis://... or postgresql://...; None: no queue
    log_level: str = "info"
    options: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        a = ["gateway", "--model", self.model, "--host", self.host, "--port", str(self.port)]
        if self.served_model_name is not None:
            a += ["--served-model-name", self.served_model_name]
        a += ["--log-level", self.log_level]
        for flag, urls in (("--prefill", self.prefill), ("--decode", self.decode), ("--worker", self.workers)):
            for u in urls:
                a += [flag, u]
        if self.queue_url is not None:
            a += ["--queue-url", self.queue_url]
        elif not any(o in _QUEUE_FLAGS or o.startswith(tuple(f + "=" for f in _QUEUE_FLAGS))
                     for o in self.options):
            a.append("--no-queue")
        return [*a, *self.options]


@dataclass(frozen=True)
class MasterCommand:
    """`mooncake_master`, the Mooncake Store's metadata server (RPC on `port`, metrics on port+1)."""

    host: str
    port: int = MASTER_PORT

    def argv(self) -> list[str]:
        return [f"--rpc_address={self.host}", f"--rpc_port={self.port}",
                f"--metrics_host={self.host}", f"--metrics_port={self.port + 1}"]


@dataclass(frozen=True)
class RedisCommand:
    """`redis-server` for the queue shared by gateways: in memory only (no snapshot, no AOF)."""

    host: str
    data_dir: str
    port: int = REDIS_PORT

    def argv(self) -> list[str]:
        return ["--bind", self.host, "--port", str(self.port), "--save", "", "--appendonly", "no",
                "--protected-mode", "no", "--dir", self.data_dir]
