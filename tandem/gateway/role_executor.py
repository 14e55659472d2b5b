"""The gateway carries out its planner's role switches on self-registered workers.

`tandem up` restarts its own workers in their new role (tandem/launcher/role_switch.py, reading
GET /internal/planner). A worker that registered itself (`tandem serve --gateway URL`) has no
such executor: the gateway tells it to switch, in-process, over its internal API
(tandem/api/internal/role_switch.py). For one switch (tandem/planner/policy.py `RoleSwitch`):
1. the registry holds the worker drained (`Registry.begin_switch`) before anything is sent to it,
   so the router sends it no new request (its heartbeats cannot lift this hold);
2. POST {worker}/internal/role {"role": to_role, "drain_timeout_s"}: the worker finishes what it
   has (KV kept for decode workers stays pinned until pulled), then changes role;
3. GET {worker}/internal/role every `poll_s` until it reports the new role and no switch under
   way, or `drain_timeout_s` + `grace_s` have passed;
4. the registry takes the role the worker reports and lifts the hold (`end_switch`).
The outcome is counted in tandem:gateway_role_switches{from_role,to_role,outcome}: "done", or
"failed" (the call failed or was refused, or the worker never reported the new role: the hold is
lifted and the worker serves in whatever role its stats report, as the monitor's polls see it).

Guards (with the planner's own, tandem/planner/policy.py: cooldown, never empty a pool, a
draining worker counts in no pool): one switch at a time (`busy`; the planner loop plans nothing
meanwhile), and only workers that registered themselves: a flag's (static) worker is left to
`tandem up`, which would otherwise restart a worker switched under it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from prometheus_client import CollectorRegistry, Counter

from tandem.gateway.registry import Registry
from tandem.gateway.worker_client import WorkerHTTP
from tandem.http.client import HTTPFailure
from tandem.planner.policy import SWITCH_KINDS, RoleSwitch

log = logging.getLogger(__name__)

ROLE_PATH = "/internal/role"


@dataclass(frozen=True)
class ExecutorConfig:
    drain_timeout_s: float = 120.0   # the worker switches anyway after draining this long
    grace_s: float = 10.0            # ... and the gateway gives up this much later
    poll_s: float = 0.25             # how often the gateway asks the worker how far it is
    call_timeout_s: float = 5.0      # one call to the worker


@dataclass(frozen=True)
class Outcome:
    switch: RoleSwitch
    done: bool
    role: str | None       # the role the worker reported last (None: no answer)
    detail: str


class RoleExecutor:
    def __init__(self, registry: Registry, http: WorkerHTTP, prom: CollectorRegistry,
                 config: ExecutorConfig = ExecutorConfig(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry, self.http, self.config, self.clock = registry, http, config, clock
        self.current: RoleSwitch | None = None     # the switch under way
        self.last: Outcome | None = None
        self._task: asyncio.Task | None = None
        self.switches = Counter("tandem:gateway_role_switches",
                                "Role switches the gateway carried out on self-registered workers.",
                                ("from_role", "to_role", "outcome"), registry=prom)
        for from_role, to_role, _ in SWITCH_KINDS:    # every series from 0 (see SWITCH_KINDS)
            for outcome in ("done", "failed"):
                self.switches.labels(from_role, to_role, outcome)

    @property
    def busy(self) -> bool:
        return self.current is not None

    def handles(self, switch: RoleSwitch) -> bool:
        """Whether this executor carries `switch` out: its worker registered itself."""
        w = self.registry.get(switch.worker_id)
        return w is not None and not w.static

    def start(self, switch: RoleSwitch,
              on_done: Callable[[Outcome], None] | None = None) -> bool:
        """Begin `switch` in the background; False if one is under way or it is not ours."""
        if self.busy or not self.handles(switch):
            return False
        self.current = switch
        self.registry.begin_switch(switch.worker_id, switch.to_role)   # before the call: step 1
        self._task = asyncio.get_running_loop().create_task(self._run(switch, on_done))
        return True

    async def close(self) -> None:
        """Gateway shutdown: stop following a switch (the worker finishes it on its own)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def wait(self) -> Outcome | None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        return self.last

    async def _run(self, sw: RoleSwitch, on_done: Callable[[Outcome], None] | None) -> None:
        try:
            outcome = await self.carry_out(sw)
        except Exception as exc:  # a bug here must not leave the worker held
            log.exception("role switch of %s failed", sw.worker_id)
            outcome = Outcome(sw, False, None, f"executor error: {exc!r}")
        report = None if outcome.role is None else {"role": outcome.role, "switching_to": None}
        self.registry.end_switch(sw.worker_id, report)
        self.switches.labels(sw.from_role, sw.to_role, "done" if outcome.done else "failed").inc()
        (log.warning if outcome.done else log.error)(
            "role switch %s %s -> %s: %s", sw.worker_id, sw.from_role, sw.to_role, outcome.detail)
        self.last, self.current = outcome, None
        if on_done is not None:
            on_done(outcome)

    async def carry_out(self, sw: RoleSwitch) -> Outcome:
        """Steps 2-3: ask the worker, then follow it until it reports the new role."""
        cfg = self.config
        body = {"role": sw.to_role, "drain_timeout_s": cfg.drain_timeout_s}
        try:
            status, reply = await self._call("POST", sw.worker_id, body)
        except (HTTPFailure, ValueError) as exc:
            return Outcome(sw, False, None, f"POST {ROLE_PATH} failed: {exc}")
        if status not in (200, 202) or not isinstance(reply, dict):
            return Outcome(sw, False, None, f"POST {ROLE_PATH} answered {status}: {reply!r:.300}")
        deadline = self.clock() + cfg.drain_timeout_s + cfg.grace_s
        role: str | None = reply.get("role")
        while True:
            if reply.get("switching_to") is None:   # the switch is over (or there was none)
                if role == sw.to_role:
                    return Outcome(sw, True, role, f"done (switch {reply.get('role_switches')})")
                return Outcome(sw, False, role, f"the worker reports role {role}")
            if self.clock() >= deadline:
                return Outcome(sw, False, None, "the worker did not finish switching in time")
            await asyncio.sleep(cfg.poll_s)
            try:
                status, got = await self._call("GET", sw.worker_id)
            except (HTTPFailure, ValueError):
                continue        # slow or restarting: asked again until the deadline
            if status == 200 and isinstance(got, dict):
                reply, role = got, got.get("role")

    async def _call(self, method: str, url: str, body: dict | None = None) -> tuple[int, object]:
        raw = b"" if body is None else orjson.dumps(body)
        async with self.http.stream(method, url, ROLE_PATH, raw, self.config.call_timeout_s) as r:
            data = await r.read()
            return r.status, (orjson.loads(data) if data else None)
