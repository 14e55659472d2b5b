"""The gateway's planner: the driver's rounds (tandem/planner/driver.py) on the gateway's own
measurements, published and counted.

Every `interval_s` the loop runs one round of the driver over the app's TTFT and inter-token
latency histograms (what the gateway's clients saw; the round's p90s come from the difference with
the previous reading), the registry's workers with the load tracker's tokens, and the gateway's
RoleExecutor. A switch is logged, counted
(`tandem:gateway_planner_switches{from_role,to_role,reason}`) and published with a sequence number at
`GET /internal/planner`. Who carries it out:
- a worker that registered itself (`tandem serve --gateway`): the gateway, at once
  (tandem/gateway/role_executor.py: drain, POST /internal/role, follow it to its new role);
- a worker from a flag: `tandem up`'s executor (tandem/launcher/role_switch.py) picks it up,
  drains the worker, restarts it in its new role and lets the monitor poll it back in. Without
  one (workers started by hand) the switch is advice in the log and the metric.

The cooldown counts from the published switch, and again from the end of a switch the gateway
carried out (its effect shows only from then). While the gateway carries one out, rounds measure
but plan nothing: one switch at a time.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.responses import json_response
from tandem.gateway.registry import Registry
from tandem.gateway.role_executor import RoleExecutor
from tandem.planner.driver import PlannerDriver, TrackedLoads
from tandem.planner.policy import SWITCH_KINDS, Measured, PlannerConfig, RoleSwitch
from tandem.router.latency_window import HistogramWindow, Reading, quantile
from tandem.router.load_tracker import LoadTracker

log = logging.getLogger(__name__)


def reading(hist: Histogram) -> Reading:
    """Cumulative bucket counts of a histogram, summed over its label sets."""
    by_le: dict[float, float] = {}
    for metric in hist.collect():
        for s in metric.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])
                by_le[le] = by_le.get(le, 0.0) + s.value
    return tuple(sorted(by_le.items())) or ((math.inf, 0.0),)


class HistogramLatencies:
    """A round's p90 TTFT and ITL from two cumulative histograms: the difference of two readings."""

    def __init__(self, ttft: Histogram, itl: Histogram) -> None:
        self.ttft, self.itl = ttft, itl
        self._ttft_win, self._itl_win = HistogramWindow(), HistogramWindow()

    def advance(self) -> Measured:
        t, i = self._ttft_win.advance(reading(self.ttft)), self._itl_win.advance(reading(self.itl))
        ms = lambda v: None if v is None else v * 1000.0  # noqa: E731
        return Measured(ms(quantile(t, 0.9)), ms(quantile(i, 0.9)), int(t[-1][1]), int(i[-1][1]))


class PlannerLoop:
    def __init__(self, config: PlannerConfig, ttft: Histogram, itl: Histogram, registry: Registry,
                 tracker: LoadTracker, prom: CollectorRegistry,
                 clock: Callable[[], float] = time.monotonic,
                 executor: RoleExecutor | None = None) -> None:
        """`executor`: carries out switches of self-registered workers (None: publish only)."""
        self.config = config
        self.executor = executor
        self.driver = PlannerDriver(config, HistogramLatencies(ttft, itl), TrackedLoads(registry, tracker),
                                    executor, clock)
        self.switches = Counter("tandem:gateway_planner_switches",
                                "Role switches the planner asked for (--slo-ttft-ms / --slo-itl-ms).",
                                ("from_role", "to_role", "reason"), registry=prom)
        for kind in SWITCH_KINDS:
            self.switches.labels(*kind)
        self.driver.measure()   # the first round measures from now

    @property
    def seq(self) -> int:
        return self.driver.seq                # published switches so far

    @property
    def measured(self) -> Measured:
        return self.driver.measured

    @property
    def last_switch_at(self) -> float | None:
        return self.driver.last_switch_at

    def round(self) -> RoleSwitch | None:
        """One planning round; returns the switch it published, if any."""
        planned = self.driver.round()
        if planned is None:
            return None
        sw, m = planned.switch, planned.measured
        self.switches.labels(sw.from_role, sw.to_role, sw.reason).inc()
        log.warning("planner: %s %s -> %s (%s: p90 TTFT %s ms, p90 ITL %s ms)", sw.worker_id,
                    sw.from_role, sw.to_role, sw.reason, m.ttft_p90_ms, m.itl_p90_ms)
        return sw

    def state(self) -> dict:
        """GET /internal/planner."""
        ex = self.executor
        return {"enabled": self.config.enabled, "config": asdict(self.config), "seq": self.seq,
                "switch": None if self.driver.last is None else asdict(self.driver.last.switch),
                "measured": asdict(self.measured),
                "in_flight": None if ex is None or ex.current is None else asdict(ex.current),
                "last_outcome": None if ex is None or ex.last is None else {
                    "worker_id": ex.last.switch.worker_id, "to_role": ex.last.switch.to_role,
                    "done": ex.last.done, "detail": ex.last.detail}}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.config.interval_s)
                return
            except TimeoutError:
                pass
            try:
                self.round()
            except Exception:  # a bug here must not stop the gateway
                log.exception("planner round failed")


def planner_route(holder: list[PlannerLoop]) -> Route:
    """GET /internal/planner: the latest switch and the round's measurements ({"enabled": false}
    when no target is set). `holder` is filled once the app's metrics exist."""
    async def state(request: Request) -> Response:
        return json_response(holder[0].state() if holder else {"enabled": False})
    return Route("/internal/planner", state, methods=["GET"])
