"""The simulator's settings (one frozen config; `tandem sim`'s flags are read in tandem/cli/sim.py).

Topologies: "colocated:N" (N role=both workers), "disagg:PpDd" (P prefill and D decode workers;
also written "pd:P:D"). A worker is `devices` accelerators of one kind (a node: TP/EP inside).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tandem.config import SchedulerConfig
from tandem.engine.prefill_order import PrefillOrder
from tandem.planner.policy import PlannerConfig
from tandem.router.admission import AdmissionLimits
from tandem.sim.gateway import GatewayConfig
from tandem.sim.trace import TraceOptions

# GPU workers: steps of up to 8k tokens, a 2k-token chunk cap while prompts wait, 256 streams
GPU_SCHEDULER = SchedulerConfig(max_num_batched_tokens=8192, max_num_seqs=256, long_prefill_token_threshold=2048)


@dataclass(frozen=True)
class Topology:
    prefill: int = 0
    decode: int = 0
    colocated: int = 0

    @property
    def roles(self) -> list[str]:
        return ["prefill"] * self.prefill + ["decode"] * self.decode + ["both"] * self.colocated

    def __str__(self) -> str:
        return f"colocated:{self.colocated}" if self.colocated else f"disagg:{self.prefill}p{self.decode}d"


def parse_topology(text: str) -> Topology:
    m = re.fullmatch(r"colocated:(\d+)", text) or re.fullmatch(r"(?:disagg|pd):(\d+)p(\d+)d", text) \
        or re.fullmatch(r"(?:disagg|pd):(\d+):(\d+)", text)
    if not m:
        raise ValueError(f"topology {text!r}: write colocated:N or disagg:PpDd (e.g. disagg:2p2d)")
    nums = [int(g) for g in m.groups()]
    topo = Topology(colocated=nums[0]) if len(nums) == 1 else Topology(prefill=nums[0], decode=nums[1])
    if not topo.roles or (len(nums) == 2 and (topo.prefill < 1 or topo.decode < 1)):
        raise ValueError(f"topology {text!r} has no worker of some role")
    return topo


@dataclass(frozen=True)
class SimConfig:
    trace: str
    trace_options: TraceOptions = TraceOptions()
    model: str = "kimi-k2.5"          # a preset of tandem/sim/model_spec.py or a model directory
    accelerator: str = "h100"         # h100 | h200 | b200 | cpu
    devices: int = 8                  # accelerators per worker
    topology: Topology = Topology(colocated=4)
    policy: str = "default"           # routing policy (tandem/router/policies)
    gateway: GatewayConfig = GatewayConfig()
    store: bool = False               # the shared KV store (Mooncake Store), loaded from by every worker
    store_gb: float = 4000.0          # its capacity
    host_gb: float = 0.0              # each worker's host-memory tier (0: none)
    kv_cache_gb: float | None = None  # a worker's KV memory (default: what the weights leave)
    scheduler: SchedulerConfig | None = None   # None: tandem's defaults on cpu, GPU_SCHEDULER else
    prefill_order: PrefillOrder = PrefillOrder()
    planner: PlannerConfig = PlannerConfig()
    limits: AdmissionLimits = AdmissionLimits()
    restart_s: float = 20.0           # a role switch's restart (Cloudflare: Kimi K2.5 boots in < 20 s)
    cpu_constants: dict = field(default_factory=dict)   # overrides of the cpu preset (fitted)
    request_rate: float | None = None  # Poisson arrivals at this rate instead of the trace's times
    seed: int = 0                      # for request_rate

    def scheduler_config(self) -> SchedulerConfig:
        if self.scheduler is not None:
            return self.scheduler
        return SchedulerConfig() if self.accelerator == "cpu" else GPU_SCHEDULER
