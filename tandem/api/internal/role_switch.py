"""A worker's role, switched at runtime (POST /internal/role; the gateway's planner sends it).

What a role changes. The engine serves every kind of call whatever its role: a `prefill_only`
request (its KV kept for a decode worker), a request with a KV handle (pulled from a prefill
worker) and a whole request. Roles differ in two things only:
- the role the worker reports (/internal/stats, heartbeats), by which the gateway puts it in a
  pool: prefill_only calls go to the prefill pool, KV-handle calls to the decode pool;
- whether it has a KV transport (`EngineConfig.resolved_transport`: on by default for prefill and
  decode, off for both unless --kv-transport), which a handoff needs on either side.
So a switch is done in-process, keeping the port, the engine, its prefix cache and its transport:
nothing restarts. A switch to prefill or decode on a worker without a transport is refused (it
needs a restart with --kv-transport).

A switch, from `request(to_role)`:
1. draining: /internal/stats reports `switching_to`, so a gateway sends no new request here
   (whoever asked for the switch); calls that still arrive (sent before the gateway saw the drain)
   are served, since the engine serves either role;
2. it waits until the worker is idle: no /internal/generate call is being admitted, nothing runs
   or waits in the engine and every KV block is free (kept blocks pulled by their decode worker
   or released: pins are honoured), or `drain_timeout_s` has passed;
3. the role changes and `switches` counts it. Nothing was stopped, so a drain that timed out loses
   nothing either: what still runs finishes under the new role.
One switch at a time: a request for another role while one is under way is a conflict (409).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tandem.api.backend import WorkerBackend
from tandem.errors import InvalidRequest, TandemError

log = logging.getLogger(__name__)

ROLES = ("both", "prefill", "decode")


@dataclass(frozen=True)
class RoleSwitchConfig:
    drain_timeout_s: float = 120.0   # switch anyway after this long (nothing is lost: see above)
    poll_s: float = 0.05             # how often the drain looks at the engine's stats


class RoleConflict(TandemError):
    status = 409
    error_type = "conflict_error"


class WorkerRole:
    """The role this worker serves in and the switch under way, if any."""

    def __init__(self, worker: WorkerBackend, config: RoleSwitchConfig = RoleSwitchConfig(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.worker = worker
        self.config = config
        self.clock = clock
        self._role: str | None = None        # None: the role the engine was started with
        self.switching_to: str | None = None
        self.since: float | None = None      # when the switch under way started
        self.switches = 0
        self.timed_out = 0                   # switches made when the drain timed out
        self.admitting = 0                   # /internal/generate calls not yet in the engine
        self._task: asyncio.Task | None = None

    @property
    def role(self) -> str:
        return self._role or self.worker.role

    def report(self) -> dict:
        """GET /internal/role, and the role fields of /internal/stats."""
        return {"role": self.role, "switching_to": self.switching_to, "role_switches": self.switches,
                "switch_elapsed_s": None if self.since is None else round(self.clock() - self.since, 3)}

    def request(self, to_role: object, drain_timeout_s: float | None = None) -> bool:
        """Start switching to `to_role`; False if there is nothing to do (already that role)."""
        if to_role not in ROLES:
            raise InvalidRequest(f"'role' must be one of {', '.join(ROLES)}, got {to_role!r}",
                                 param="role")
        if self.switching_to is not None:
            if self.switching_to == to_role:
                return True    # the same request again (a retried call): already under way
            raise RoleConflict(f"a switch to {self.switching_to} is under way; ask again once "
                               f"GET /internal/role shows it done")
        if to_role == self.role:
            return False
        if to_role != "both" and self.worker.transport_address is None:
            raise RoleConflict(f"this worker has no KV transport, so it cannot serve as {to_role}; "
                               "restart it with --kv-transport tcp (or shm, mooncake)")
        timeout = self.config.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        self.switching_to, self.since = to_role, self.clock()
        log.warning("role switch: %s -> %s; draining (at most %.0f s)", self.role, to_role, timeout)
        self._task = asyncio.get_running_loop().create_task(self._drain_then_switch(timeout))
        return True

    def idle(self) -> bool:
        """Nothing being admitted, running or waiting, and every KV block free (none kept)."""
        s = self.worker.stats()
        return (self.admitting == 0 and s.num_running == 0 and s.num_waiting == 0
                and s.num_blocks_free == s.num_blocks_total)

    async def _drain_then_switch(self, timeout_s: float) -> None:
        deadline = self.clock() + timeout_s
        # idle twice in a row, one stats refresh apart: a call admitted between two looks is seen
        idle_seen = 0
        while idle_seen < 2 and self.clock() < deadline:
            idle_seen = idle_seen + 1 if self.idle() else 0
            await asyncio.sleep(self.config.poll_s)
        old, new = self.role, self.switching_to
        timed_out = idle_seen < 2
        self._role, self.switching_to, self.since = new, None, None
        self.switches += 1
        self.timed_out += timed_out
        log.warning("role switch: %s -> %s done%s", old, new,
                    " (drain timed out: what still ran continues)" if timed_out else "")

    async def wait(self) -> None:
        """Until the switch under way (if any) is done (tests, shutdown)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
