"""Build a simulated fleet from a SimConfig, replay a trace through it, summarize.

    loop -> gateway (real Router + placement + LoadTracker + PrefixIndex) -> workers (cost model)
         -> planner (real plan()) every round, when a latency target is set

Deterministic: events run in (time, insertion order), nothing reads the wall clock, and the
only randomness (Poisson arrivals with `request_rate`) comes from `seed`. A request that
`follows` another (an agent's next turn) arrives its think time after that one ended.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

from tandem.router.load_tracker import LoadTracker
from tandem.router.policies import make_policy
from tandem.router.prefix_index import STORE, PrefixIndex, tier_holder
from tandem.router.router import Router, pools_policies
from tandem.router.routed_prefixes import RoutedPrefixes
from tandem.router.sessions import SessionTable
from tandem.sim.agentic import agentic_trace
from tandem.sim.config import SimConfig
from tandem.sim.cost_model import CostModel
from tandem.sim.events import EventLoop
from tandem.sim.gateway import SimGateway
from tandem.sim.hardware import accelerator
from tandem.sim.kv_tiers import BlockTier
from tandem.sim.metrics import Metrics
from tandem.sim.model_spec import model_spec
from tandem.sim.planner import SimPlanner
from tandem.sim.registry import SimRegistry
from tandem.sim.request import SimRequest
from tandem.sim.trace import Trace, load_trace
from tandem.sim.worker import SimWorker

GB = 1e9


def cost_model(cfg: SimConfig) -> CostModel:
    accel = accelerator(cfg.accelerator)
    if cfg.accelerator == "cpu" and cfg.cpu_constants:
        accel = accel.scaled(**cfg.cpu_constants)
    kv = cfg.kv_cache_gb * GB if cfg.kv_cache_gb is not None else None
    return CostModel(model_spec(cfg.model), accel, cfg.devices, kv)


def with_poisson_arrivals(trace: Trace, rate: float, seed: int) -> Trace:
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for r in trace.requests:
        reqs.append(replace(r, arrival=t))
        t += rng.expovariate(rate)
    return replace(trace, requests=tuple(reqs))


class Fleet:
    def __init__(self, cfg: SimConfig, trace: Trace) -> None:
        self.cfg, self.trace = cfg, trace
        self.loop = EventLoop()
        self.cost = cost_model(cfg)
        bs = trace.block_size
        block_bytes = bs * self.cost.model.kv_bytes_per_token()
        self.index = PrefixIndex(store_limit=max(1, int(cfg.store_gb * GB / block_bytes)))
        self.tracker = LoadTracker(clock=lambda: self.loop.now)
        self.metrics = Metrics()
        capacity = self.cost.kv_capacity_tokens() // bs
        self.store = BlockTier("store", self.index.store_limit, lambda hs: self.index.stored(STORE, hs),
                               lambda hs: self.index.removed(STORE, hs)) if cfg.store else None
        host_blocks = int(cfg.host_gb * GB / block_bytes)
        sched = cfg.scheduler_config()
        self.workers = [
            SimWorker(f"{role}-{i}", role, self.loop, self.cost, sched, cfg.prefill_order, bs, capacity,
                      self._host_tier(f"{role}-{i}", host_blocks), self.store,
                      self.index.stored, self.index.removed)
            for i, role in enumerate(cfg.topology.roles)]
        self.registry = SimRegistry(self.workers)
        policy = make_policy(cfg.policy)
        self.router = Router(self.registry, self.index, self.tracker, pools_policies(policy), cfg.limits,
                             on_decision=lambda pool, d: self.metrics.decisions.update([f"{pool}:{d.reason}"]),
                             sessions=SessionTable(clock=lambda: self.loop.now),
                             routed=RoutedPrefixes(clock=lambda: self.loop.now))
        self.gateway = SimGateway(self.loop, self.router, self.tracker, self.registry, self.metrics,
                                  cfg.gateway, bs)
        self._arrived = 0
        self._followers: dict[str, list[SimRequest]] = {}   # request id -> the turns that wait for it
        self.planner = SimPlanner(self.loop, cfg.planner, self.registry, self.tracker, self.metrics,
                                  cfg.restart_s, self._active)

    def _host_tier(self, url: str, blocks: int) -> BlockTier | None:
        """A worker's host-memory tier, its contents reported to the prefix index as the worker's
        "host" holder (the router's `WorkerLoad.host_blocks`)."""
        if not blocks:
            return None
        holder = tier_holder(url, "host")
        return BlockTier("host", blocks, lambda hs: self.index.stored(holder, hs),
                         lambda hs: self.index.removed(holder, hs))

    def _active(self) -> bool:
        return self._arrived < len(self.trace.requests) or self.metrics.outstanding > 0

    def _arrive(self, req: SimRequest) -> None:
        self._arrived += 1
        self.gateway.arrive(req)

    def _next_turns(self, req: SimRequest, t: float) -> None:
        """Closed loop: the requests that follow `req` arrive their think time after it ended."""
        for nxt in self._followers.pop(req.request_id, ()):
            nxt.arrival = t + nxt.think_s
            self.loop.at(nxt.arrival, lambda r=nxt: self._arrive(r))

    def run(self) -> dict:
        wall = time.perf_counter()
        for req in self.trace.requests:
            if req.follows is not None:
                self._followers.setdefault(req.follows, []).append(req)
            else:
                self.loop.at(req.arrival, lambda r=req: self._arrive(r))
        self.metrics.on_done = self._next_turns
        self.planner.start()
        self.loop.run()
        out = self.metrics.summary(self.trace.requests, self.trace.ideal_hit_tokens)
        c = self.cost
        out["setup"] = {
            "model": c.model.name, "accelerator": c.accel.name, "devices_per_worker": c.devices,
            "topology": str(self.cfg.topology), "policy": self.cfg.policy,
            "affinity": self.cfg.gateway.affinity, "store": self.cfg.store,
            "block_size": self.trace.block_size, "kv_capacity_tokens_per_worker": c.kv_capacity_tokens(),
            "scheduler": vars(self.cfg.scheduler_config()), "trace_sessions": self.trace.sessions}
        end = self.loop.now or 1e-9
        out["workers"] = {w.url: {"role": w.role, "steps": w.steps, "busy": round(w.busy_time / end, 3)}
                          for w in self.workers}
        out["planner"] = [{"t": round(s.decided_at, 1), "worker": s.switch.worker_id, "to": s.switch.to_role,
                           "reason": s.switch.reason} for s in self.planner.switches]
        out["sim"] = {"events": self.loop.processed, "wall_s": round(time.perf_counter() - wall, 2),
                      "simulated_s": round(self.loop.now, 2)}
        return out


def simulate(cfg: SimConfig) -> dict:
    """`cfg.trace`: a Mooncake-format file, or "agentic" (tandem/sim/agentic.py's defaults)."""
    trace = agentic_trace() if cfg.trace == "agentic" else load_trace(cfg.trace, cfg.trace_options)
    if cfg.request_rate:
        trace = with_poisson_arrivals(trace, cfg.request_rate, cfg.seed)
    return Fleet(cfg, trace).run()
