"""The planner in the simulation: the real driver (tandem/planner/driver.py) every round, on the
round's p90 TTFT and ITL, and its switches carried out as `tandem up` does
(tandem/launcher/role_switch.py): drain the worker at the gateway, wait until it is idle, stop it,
start it again in its new role (`restart_s`: its cache is empty after), let the gateway take it
back. As with `tandem up`, whose switches the gateway only publishes, the driver never hears
when a switch ends: the cooldown counts from the switch's decision.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tandem.planner.driver import PlannedSwitch, PlannerDriver, TrackedLoads
from tandem.planner.policy import Measured, PlannerConfig, RoleSwitch
from tandem.router.load_tracker import LoadTracker
from tandem.sim.events import EventLoop
from tandem.sim.metrics import Metrics
from tandem.sim.registry import SimRegistry


class SampleLatencies:
    """A round's p90 TTFT and ITL from the samples the metrics recorded since the previous round."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._ttft_at = self._itl_at = 0

    def advance(self) -> Measured:
        m = self.metrics
        ttft, itl = m.ttft[self._ttft_at:], m.itl[self._itl_at:]
        self._ttft_at, self._itl_at = len(m.ttft), len(m.itl)
        p90 = lambda v: float(np.percentile(np.asarray(v), 90)) * 1000.0 if len(v) else None  # noqa: E731
        return Measured(p90(ttft), p90(itl), len(ttft), len(itl))


class SimRestarts:
    """The driver's executor: `tandem up`'s drain, stop and restart, on simulated workers.
    Never busy (the gateway's planner sees no switch under way) and never reports an end."""

    busy = False

    def __init__(self, loop: EventLoop, registry: SimRegistry, tracker: LoadTracker, restart_s: float,
                 poll_s: float) -> None:
        self.loop, self.registry, self.tracker = loop, registry, tracker
        self.restart_s, self.poll_s = restart_s, poll_s

    def start(self, switch: RoleSwitch, on_done: Callable[..., None]) -> None:
        worker = self.registry.by_url(switch.worker_id)
        worker.draining = True
        self._wait_idle(worker.url, switch.to_role)

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


class SimPlanner:
    def __init__(self, loop: EventLoop, config: PlannerConfig, registry: SimRegistry, tracker: LoadTracker,
                 metrics: Metrics, restart_s: float, active: Callable[[], bool], poll_s: float = 0.25) -> None:
        self.loop, self.config, self.active = loop, config, active
        restarts = SimRestarts(loop, registry, tracker, restart_s, poll_s)
        self.driver = PlannerDriver(config, SampleLatencies(metrics), TrackedLoads(registry, tracker), restarts,
                                    lambda: loop.now)
        self.switches: list[PlannedSwitch] = []

    def start(self) -> None:
        if self.config.enabled:
            self.loop.after(self.config.interval_s, self._round)

    def _round(self) -> None:
        if not self.active():
            return
        planned = self.driver.round()
        if planned is not None:
            self.switches.append(planned)
        self.loop.after(self.config.interval_s, self._round)
