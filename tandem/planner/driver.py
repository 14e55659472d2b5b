"""The planner's driver: one planning round, the same in the gateway and in the fleet simulator.

Its caller's loop calls `round()` every `PlannerConfig.interval_s`; a round:
1. measures the latencies seen since the previous round (`Latencies.advance`), kept as `measured`;
2. plans nothing while the executor is carrying out a switch (one switch at a time);
3. otherwise asks the policy (tandem/planner/policy.py `plan`) on that measurement, the workers as
   the router sees them (`Loads.loads`) and the time since the last switch (its cooldown);
4. a switch is recorded (`seq`, `last`), the cooldown restarts from now, and the executor starts it.
The cooldown counts from the decision and, when the executor reports the end of a switch (the
gateway's does on self-registered workers), again from that end: the new role's effect shows
only from then. An executor that does not report it (`tandem up`'s, which the gateway only
publishes to) leaves the cooldown counting from the decision.

What it reads and drives are small protocols, so the same rounds run over the gateway's
histograms, registry and RoleExecutor (tandem/gateway/planner_loop.py) and over the simulator's
samples, SimRegistry and simulated restarts (tandem/sim/planner.py), and over fakes in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tandem.planner.policy import Measured, PlannerConfig, RoleSwitch, plan
from tandem.router.load_tracker import LoadTracker
from tandem.router.snapshot import WorkerLoad


class Latencies(Protocol):
    def advance(self) -> Measured: ...   # p90 TTFT and ITL, and their samples, since the last call


class Loads(Protocol):
    def loads(self) -> tuple[WorkerLoad, ...]: ...   # every worker now, in registration order


class Executor(Protocol):
    """Carries out a decided switch (drain the worker, change its role, take it back)."""

    @property
    def busy(self) -> bool: ...   # a switch under way: the driver plans nothing meanwhile

    def start(self, switch: RoleSwitch, on_done: Callable[..., None]) -> object:
        """Begin `switch`; call `on_done` once its new role took effect, if it knows when."""
        ...


class WorkerView(Protocol):
    """What the planner reads of one worker (tandem.gateway.registry.Worker, tandem.sim.worker.SimWorker)."""

    url: str              # also its id
    role: str | None      # None until reported: counted as both
    healthy: bool
    draining: bool


class WorkerTable(Protocol):
    def all(self) -> Sequence[WorkerView]: ...   # registration order


class TrackedLoads:
    """The workers' loads as the router sees them: the table's state and the tracker's tokens."""

    def __init__(self, table: WorkerTable, tracker: LoadTracker) -> None:
        self.table, self.tracker = table, tracker

    def loads(self) -> tuple[WorkerLoad, ...]:
        out = []
        for w in self.table.all():
            load = self.tracker.load(w.url)
            out.append(WorkerLoad(worker_id=w.url, url=w.url, role=w.role or "both", healthy=w.healthy,
                                  draining=w.draining, prefill_tokens=load.prefill_tokens,
                                  decode_tokens=load.decode_tokens, in_flight=load.in_flight))
        return tuple(out)


@dataclass(frozen=True)
class PlannedSwitch:
    decided_at: float     # the driver's clock
    switch: RoleSwitch
    measured: Measured    # the round that decided it


class PlannerDriver:
    def __init__(self, config: PlannerConfig, latencies: Latencies, loads: Loads,
                 executor: Executor | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """`executor`: None decides and records only (the switch is advice, or carried out by
        someone reading `last`)."""
        self.config, self.latencies, self.loads, self.executor = config, latencies, loads, executor
        self.clock = clock
        self.measured = Measured(None, None)      # the latest round's
        self.seq = 0                              # switches decided so far
        self.last: PlannedSwitch | None = None    # the latest one
        self.last_switch_at: float | None = None  # where the cooldown counts from

    def measure(self) -> Measured:
        """Close the measurement window (the next one starts now)."""
        self.measured = self.latencies.advance()
        return self.measured

    def round(self) -> PlannedSwitch | None:
        """One planning round; returns the switch it decided, if any."""
        m = self.measure()
        if self.executor is not None and self.executor.busy:
            return None
        now = self.clock()
        since = None if self.last_switch_at is None else now - self.last_switch_at
        switch = plan(m, self.loads.loads(), self.config, since)
        if switch is None:
            return None
        self.last_switch_at = now
        self.seq += 1
        self.last = PlannedSwitch(now, switch, m)
        if self.executor is not None:
            self.executor.start(switch, self.switch_ended)
        return self.last

    def switch_ended(self, *_outcome: object) -> None:
        """The executor's `on_done`: the cooldown runs from when the new role took effect."""
        self.last_switch_at = self.clock()
