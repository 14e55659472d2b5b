"""Supervision for `tandem up`: a child that dies after start-up is restarted, with backoff.

A worker (or a gateway, or the mooncake_master of `--kv-store auto`) that exits while the
cluster runs is reaped and started again with the same command, port and cores, after a backoff that doubles with each restart in a row
(`initial_backoff_s`, 2x, ... up to `max_backoff_s`) and resets once the child has stayed up
`stable_after_s`. The other children keep running: the gateway marks the dead worker unhealthy
(a refused connection or failed polls), retries or migrates its requests, serves whole requests
on the other pool while a disaggregated pool is empty (tandem/router/router.py `mode`), and
polls the worker back in when it answers again (the gateway counts the new instance in
`tandem:gateway_worker_restarts`). Every death and restart is logged here, with its count.

Before the cluster is ready a death still stops everything: that is a configuration error
(a bad flag, a missing model), which a restart would only repeat.

Decisions are a pure function of the children's exit states and an explicit clock, so the tests
drive `Supervisor.step` with fake processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class RestartPolicy:
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    stable_after_s: float = 60.0    # up this long: the next death starts from initial_backoff_s


class Children(Protocol):
    """What the supervisor needs of tandem.launcher.cluster.LocalCluster."""

    def exited(self) -> dict[str, int]: ...        # name -> exit code of children that have ended
    def forget(self, name: str) -> None: ...       # drop an ended child from the running set
    def start(self, name: str | None = None) -> None: ...


@dataclass
class ChildRecord:
    started_at: float
    backoff_s: float
    restarts: int = 0
    restart_at: float | None = None   # dead, to be started again at this time


@dataclass
class Supervisor:
    children: Children
    names: list[str]
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    clock: Callable[[], float] = time.monotonic
    log: Callable[[str], None] = print
    records: dict[str, ChildRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        now = self.clock()
        for name in self.names:
            self.records[name] = ChildRecord(now, self.policy.initial_backoff_s)

    @property
    def total_restarts(self) -> int:
        return sum(r.restarts for r in self.records.values())

    def step(self) -> None:
        """Notice children that died (schedule their restart) and restart those that are due."""
        now = self.clock()
        for name, code in sorted(self.children.exited().items()):
            rec = self.records[name]
            self.children.forget(name)
            if now - rec.started_at >= self.policy.stable_after_s:
                rec.backoff_s = self.policy.initial_backoff_s
            rec.restart_at = now + rec.backoff_s
            self.log(f"tandem up: {name} exited with code {code}; restarting in {rec.backoff_s:.1f}s "
                     f"(restart {rec.restarts + 1})")
            rec.backoff_s = min(self.policy.max_backoff_s, rec.backoff_s * 2)
        for name, rec in self.records.items():
            if rec.restart_at is not None and now >= rec.restart_at:
                rec.restart_at = None
                rec.restarts += 1
                rec.started_at = now
                self.children.start(name)
                self.log(f"tandem up: {name} restarted (restart {rec.restarts})")
