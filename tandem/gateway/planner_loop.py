"""The gateway's planning rounds: measure, ask the planner (tandem/planner/policy.py), publish.

Every `interval_s` the loop reads the app's TTFT and inter-token latency histograms (what the
gateway's clients saw), takes the round's p90s from the difference with the previous reading,
builds the workers' load view and asks `plan`. A switch is logged, counted
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

from tandem.gateway.registry import Registry
from tandem.gateway.role_executor import Outcome, RoleExecutor
from tandem.planner.policy import Measured, PlannerConfig, RoleSwitch, plan
from tandem.router.latency_window import HistogramWindow, Reading, quantile
from tandem.router.load_tracker import LoadTracker
from tandem.router.snapshot import WorkerLoad
from tandem.server.responses import json_response

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


class PlannerLoop:
    def __init__(self, config: PlannerConfig, ttft: Histogram, itl: Histogram, registry: Registry,
                 tracker: LoadTracker, prom: CollectorRegistry,
                 clock: Callable[[], float] = time.monotonic,
                 executor: RoleExecutor | None = None) -> None:
        """`executor`: carries out switches of self-registered workers (None: publish only)."""
        self.config = config
        self.executor = executor
        self.ttft, self.itl = ttft, itl
        self.registry, self.tracker = registry, tracker
        self.clock = clock
        self._ttft_win, self._itl_win = HistogramWindow(), HistogramWindow()
        self.last_switch_at: float | None = None
        self.seq = 0                              # published switches so far
        self.switch: RoleSwitch | None = None     # the latest one
        self.measured = Measured(None, None)
        self.switches = Counter("tandem:gateway_planner_switches",
                                "Role switches the planner asked for (--slo-ttft-ms / --slo-itl-ms).",
                                ("from_role", "to_role", "reason"), registry=prom)
        self.advance()   # the first round measures from now

    def advance(self) -> Measured:
        t, i = self._ttft_win.advance(reading(self.ttft)), self._itl_win.advance(reading(self.itl))
        ms = lambda v: None if v is None else v * 1000.0  # noqa: E731
        self.measured = Measured(ms(quantile(t, 0.9)), ms(quantile(i, 0.9)), int(t[-1][1]), int(i[-1][1]))
        return self.measured

    def workers(self) -> tuple[WorkerLoad, ...]:
        out = []
        for w in self.registry.all():
            load = self.tracker.load(w.url)
            out.append(WorkerLoad(worker_id=w.url, url=w.url, role=w.role or "both", healthy=w.healthy,
                                  draining=w.draining, prefill_tokens=load.prefill_tokens,
                                  decode_tokens=load.decode_tokens, in_flight=load.in_flight))
        return tuple(out)

    def round(self) -> RoleSwitch | None:
        """One planning round; returns the switch it published, if any."""
        m = self.advance()
        if self.executor is not None and self.executor.busy:
            return None
        now = self.clock()
        since = None if self.last_switch_at is None else now - self.last_switch_at
        switch = plan(m, self.workers(), self.config, since)
        if switch is not None:
            self.last_switch_at = now
            self.seq += 1
            self.switch = switch
            self.switches.labels(switch.from_role, switch.to_role, switch.reason).inc()
            log.warning("planner: %s %s -> %s (%s: p90 TTFT %s ms, p90 ITL %s ms)", switch.worker_id,
                        switch.from_role, switch.to_role, switch.reason, m.ttft_p90_ms, m.itl_p90_ms)
            if self.executor is not None:
                self.executor.start(switch, self._switch_ended)
        return switch

    def _switch_ended(self, outcome: Outcome) -> None:
        self.last_switch_at = self.clock()   # the cooldown runs from when the new role took effect

    def state(self) -> dict:
        """GET /internal/planner."""
        ex = self.executor
        return {"enabled": self.config.enabled, "config": asdict(self.config), "seq": self.seq,
                "switch": None if self.switch is None else asdict(self.switch),
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
