"""`tandem up` carries out the gateway planner's role switches (tandem/planner/policy.py).

The gateway publishes its latest switch at GET /internal/planner with a sequence number; this
executor polls it and, for a switch it has not done yet whose worker is one of its children:
1. drains the worker at the gateway (POST /internal/drain), and at the other gateways of
   `tandem up --gateways N` (`also_drain`, best effort): no new request goes to it;
2. waits until the worker is idle by its own report (nothing running or waiting, every KV block
   free: its prefills' KV handed over, its streams finished), or `drain_timeout_s`;
3. stops it (SIGTERM) and starts it again on the same port and cores with the new `--role`
   (and, through `as_role`, the new role's arguments, e.g. a profile's parallel layout);
   the gateway's monitor sees a new instance, takes its role from its stats and lifts the drain.
No request is lost: the drained worker finishes what it has, and a request that still fails
when it stops (after the timeout) is retried or migrated by the gateway as for any dead worker.

One switch at a time; the loop is stepped from `tandem up`'s supervision loop (same thread as
the supervisor, so a deliberate stop is never mistaken for a death).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from tandem.launcher.proc_spec import ProcSpec


class Cluster(Protocol):
    procs: list[ProcSpec]

    def kill(self, name: str, sig: int = ...) -> None: ...
    def start(self, name: str | None = None) -> None: ...


@dataclass
class _Draining:
    name: str
    to_role: str
    seq: int
    since: float


def with_role(spec: ProcSpec, role: str) -> ProcSpec:
    """The same worker command with `--role role`."""
    cmd = list(spec.cmd)
    cmd[cmd.index("--role") + 1] = role
    return replace(spec, cmd=tuple(cmd), role=role)


class RoleSwitcher:
    def __init__(self, cluster: Cluster, gateway_url: str, get_json: Callable[[str], dict],
                 post_json: Callable[[str, dict], dict], poll_s: float = 2.0,
                 drain_timeout_s: float = 120.0, clock: Callable[[], float] = time.monotonic,
                 as_role: Callable[[ProcSpec, str], ProcSpec] | None = None,
                 log: Callable[[str], None] = print, also_drain: tuple[str, ...] = ()) -> None:
        self.cluster = cluster
        self.gateway_url = gateway_url
        self.also_drain = also_drain   # the other gateways' URLs
        self.get_json, self.post_json = get_json, post_json
        self.poll_s, self.drain_timeout_s = poll_s, drain_timeout_s
        self.clock, self.log = clock, log
        self.as_role = as_role or with_role
        self.done_seq = 0
        self.draining: _Draining | None = None
        self._next_poll = 0.0
        self.switches = 0

    def step(self) -> None:
        now = self.clock()
        if self.draining is not None:
            self._continue(now)
        elif now >= self._next_poll:
            self._next_poll = now + self.poll_s
            self._poll(now)

    def _poll(self, now: float) -> None:
        try:
            state = self.get_json(self.gateway_url + "/internal/planner")
        except Exception:  # noqa: BLE001 - the gateway may be restarting; ask again next time
            return
        sw, seq = state.get("switch"), int(state.get("seq", 0))
        if not state.get("enabled") or sw is None or seq <= self.done_seq:
            return
        proc = next((p for p in self.cluster.procs if p.url == sw["worker_id"]), None)
        if proc is None or proc.role != sw["from_role"]:
            self.done_seq = seq   # not ours, or already switched
            return
        try:
            self.post_json(self.gateway_url + "/internal/drain", {"url": proc.url})
        except Exception:  # noqa: BLE001
            return            # tried again at the next poll
        for url in self.also_drain:
            try:
                self.post_json(url + "/internal/drain", {"url": proc.url})
            except Exception:  # noqa: BLE001 - a gateway restarting: the worker's drain still ends its calls there
                pass
        self.log(f"tandem up: planner: draining {proc.name} ({proc.url}) to switch it "
                 f"{sw['from_role']} -> {sw['to_role']} ({sw['reason']})")
        self.draining = _Draining(proc.name, sw["to_role"], seq, now)

    def _continue(self, now: float) -> None:
        d = self.draining
        proc = next(p for p in self.cluster.procs if p.name == d.name)
        idle = False
        try:
            s = self.get_json(proc.url + "/internal/stats")
            idle = (s.get("num_running") == 0 and s.get("num_waiting") == 0
                    and s.get("num_blocks_free") == s.get("num_blocks_total"))
        except Exception:  # noqa: BLE001 - it died meanwhile: the restart below replaces it
            idle = True
        timed_out = now - d.since > self.drain_timeout_s
        if not (idle or timed_out):
            return
        self.cluster.kill(d.name, signal.SIGTERM)
        i = self.cluster.procs.index(proc)
        self.cluster.procs[i] = self.as_role(proc, d.to_role)
        self.cluster.start(d.name)
        self.done_seq, self.draining = d.seq, None
        self.switches += 1
        self.log(f"tandem up: planner: {d.name} restarted as {d.to_role}"
                 + (" (drain timed out)" if timed_out and not idle else ""))
