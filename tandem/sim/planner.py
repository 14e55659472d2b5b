"""The planner in the simulation: the real `plan()` (tandem/planner/policy.py) every round, on the
round's p90 TTFT and ITL, and its switches carried out as `tandem up` does
(tandem/launcher/role_switch.py): drain the worker at the gateway, wait until it is idle, stop it,
start it again in its new role (`restart_s`: its cache is empty after), let the gateway take it
back. The cooldown counts from the switch's decision, as in the gateway's planner loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tandem.planner.policy import Measured, PlannerConfig, RoleSwitch, plan
from tandem.router.load_tracker import LoadTracker
from tandem.router.snapshot import WorkerLoad
from tandem.sim.events import EventLoop
from tandem.sim.metrics import Metrics
from tandem.sim.registry import SimRegistry


@dataclass(frozen=True)
class Switch:
    decided_at: float
    switch: RoleSwitch
    measured: Measured


class SimPlanner:
    def __init__(self, loop: EventLoop, config: PlannerConfig, registry: SimRegistry, tracker: LoadTracker,
                 metrics: Metrics, restart_s: float, active: Callable[[], bool], poll_s: float = 0.25) -> None:
        self.loop, self.config, self.registry, self.tracker = loop, config, registry, tracker
        self.metrics, self.restart_s, self.active, self.poll_s = metrics, restart_s, active, poll_s
        self.switches: list[Switch] = []
        self._ttft_at = self._itl_at = 0
        self._last: float | None = None

    def start(self) -> None:
        if self.config.enabled:
            self.loop.after(self.config.interval_s, self._round)

    def measure(self) -> Measured:
        m = self.metrics
        ttft, itl = m.ttft[self._ttft_at:], m.itl[self._itl_at:]
        self._ttft_at, self._itl_at = len(m.ttft), len(m.itl)
        p90 = lambda v: float(np.percentile(np.asarray(v), 90)) * 1000.0 if len(v) else None  # noqa: E731
        return Measured(p90(ttft), p90(itl), len(ttft), len(itl))

    def workers(self) -> tuple[WorkerLoad, ...]:
        out = []
        for w in self.registry.all():
            load = self.tracker.load(w.url)
            out.append(WorkerLoad(worker_id=w.url, url=w.url, role=w.role or "both", healthy=w.healthy,
                                  draining=w.draining, prefill_tokens=load.prefill_tokens,
                                  decode_tokens=load.decode_tokens, in_flight=load.in_flight))
        return tuple(out)

    def _round(self) -> None:
        if not self.active():
            return
        m = self.measure()
        now = self.loop.now
        since = None if self._last is None else now - self._last
        switch = plan(m, self.workers(), self.config, since)
        if switch is not None:
            self._last = now
            self.switches.append(Switch(now, switch, m))
            worker = self.registry.by_url(switch.worker_id)
            worker.draining = True
            self._wait_idle(worker.url, switch.to_role)
        self.loop.after(self.config.interval_s, self._round)

    def _wait_idle(self, url: str, to_role: str) -> None:
        worker = self.registry.by_url(url)
        if not worker.idle():
            self.loop.after(self.poll_s, lambda: self._wait_idle(url, to_role))
            return
        worker.healthy = False   # stopped; the gateway sees it gone until it is back

        def back() -> None:
            worker.restart(to_role)
            self.tracker.forget(url)
            worker.healthy, worker.draining = True, False
        self.loop.after(self.restart_s, back)
