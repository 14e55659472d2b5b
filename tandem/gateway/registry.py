"""The gateway's workers: who they are, whether they are healthy, what they last reported.

Pure bookkeeping with an explicit clock (`now` arguments); the polling I/O lives in
`tandem.gateway.monitor`. Workers come from flags (kept forever) or from self-registration
(`POST /internal/register`, repeated as heartbeats; dropped after `heartbeat_ttl_s` of silence).

Health: a worker starts unhealthy and becomes healthy on its first successful stats poll;
`unhealthy_after` consecutive failures make it unhealthy again. Draining workers take no new
requests but finish theirs.

Role: a heartbeat names the role the worker registers with; once a stats poll has answered, the
role in the worker's stats wins (a worker switched at runtime, POST /internal/role, reports its new
role there while its heartbeats still name the one it started with).
Draining (`draining`, what routing reads) is any of: a drain asked of the gateway (POST
/internal/drain: it holds until the worker at that URL is a new instance, whatever its heartbeats
say), the worker's heartbeat saying it drains, a role switch the gateway is carrying out
(`switching_to`: no heartbeat lifts it), a switch the worker reports under way in its stats, or
the worker's stats saying it drains before it stops (`draining`: SIGTERM, tandem/worker/drain.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.gateway.config import RegistryConfig
from tandem.router.snapshot import ROLES


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url


@dataclass
class Worker:
    url: str                         # also its id
    role: str | None                 # None until its stats say (a --worker flag)
    static: bool                     # from a flag: never expires
    healthy: bool = False
    draining: bool = False           # takes no new requests: derived, see `_settle`
    failures: int = 0                # consecutive failed polls
    last_ok: float | None = None
    last_heartbeat: float | None = None
    stats: dict = field(default_factory=dict)   # last /internal/stats reply
    kv_since: int = 0                # next `since` for /internal/kv_events
    epoch: int = 0                   # bumped each time it turns unhealthy (index must resync)
    restarts: int = 0                # new instances seen at this URL (its stats' instance_id changed)
    drain_asked: bool = False        # POST /internal/drain (for this instance of the worker)
    reports_draining: bool = False   # its last heartbeat said it drains
    switching_to: str | None = None  # a role switch the gateway is carrying out (role_executor.py)
    role_seq: int = 0                # bumped when a switch begins or ends: older stats replies are stale

    @property
    def block_size(self) -> int | None:
        layout = self.stats.get("kv_layout") or {}
        return layout.get("block_size")

    @property
    def hash_seed(self) -> int:
        return int(self.stats.get("hash_seed") or 0)


class Registry:
    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._workers: dict[str, Worker] = {}

    # --- membership ---------------------------------------------------------------------
    def add_static(self, url: str, role: str | None) -> Worker:
        url = normalize_url(url)
        _check_role(role)
        w = self._workers.get(url)
        if w is None:
            w = self._workers[url] = Worker(url, role, static=True)
        w.static = True
        if role is not None:
            w.role = role
        return w

    def heartbeat(self, url: str, role: str, now: float, draining: bool = False) -> Worker:
        """A registration or a heartbeat (same message): adds the worker or refreshes it."""
        url = normalize_url(url)
        _check_role(role)
        w = self._workers.get(url)
        if w is None:
            w = self._workers[url] = Worker(url, role, static=False)
        if w.stats.get("role") not in ROLES:   # no stats yet: the heartbeat's role stands
            w.role = role
        w.last_heartbeat = now
        w.reports_draining = draining
        _settle(w)
        return w

    def remove(self, url: str) -> Worker | None:
        return self._workers.pop(normalize_url(url), None)

    def drain(self, url: str) -> bool:
        w = self._workers.get(normalize_url(url))
        if w is None:
            return False
        w.drain_asked = True
        _settle(w)
        return True

    def undrain(self, url: str) -> None:
        """Lift a drain asked of the gateway (it was for the worker's previous instance)."""
        w = self._workers.get(normalize_url(url))
        if w is not None:
            w.drain_asked = False
            _settle(w)

    # --- role switches (tandem/gateway/role_executor.py) -----------------------------------
    def begin_switch(self, url: str, to_role: str) -> Worker | None:
        """Hold the worker drained until `end_switch`, whatever its heartbeats say."""
        _check_role(to_role)
        w = self._workers.get(normalize_url(url))
        if w is not None:
            w.switching_to = to_role
            w.role_seq += 1
            _settle(w)
        return w

    def end_switch(self, url: str, report: dict | None) -> Worker | None:
        """The switch is over; `report` is the worker's GET /internal/role answer (None: it gave
        none), whose role and switch state stand until the next stats poll."""
        w = self._workers.get(normalize_url(url))
        if w is None:
            return None
        if w.switching_to is not None:
            w.switching_to = None
            w.role_seq += 1
        if report is not None and report.get("role") in ROLES:
            w.role = report["role"]
            w.stats = {**w.stats, "role": report["role"], "switching_to": report.get("switching_to")}
        _settle(w)
        return w

    def expire(self, now: float) -> list[Worker]:
        """Drop self-registered workers whose heartbeats stopped; returns them."""
        gone = [w for w in self._workers.values() if not w.static and w.last_heartbeat is not None
                and now - w.last_heartbeat > self.config.heartbeat_ttl_s]
        for w in gone:
            del self._workers[w.url]
        return gone

    # --- health --------------------------------------------------------------------------
    def poll_ok(self, url: str, stats: dict, now: float) -> Worker | None:
        w = self._workers.get(url)
        if w is None:
            return None
        w.stats = stats
        role = stats.get("role")
        if role in ROLES:
            w.role = role
        w.failures = 0
        w.last_ok = now
        w.healthy = w.role is not None
        if w.switching_to is not None and role == w.switching_to and stats.get("switching_to") is None:
            # the worker says its switch is over: lift the hold now, not when the executor next
            # asks (a worker of its new role held draining would empty its pool meanwhile)
            w.switching_to = None
            w.role_seq += 1
        _settle(w)
        return w

    def poll_failed(self, url: str) -> bool:
        """Count a failed poll (or a failed request); True if this made the worker unhealthy."""
        w = self._workers.get(url)
        if w is None:
            return False
        w.failures += 1
        if w.healthy and w.failures >= self.config.unhealthy_after:
            w.healthy = False
            w.epoch += 1
            w.kv_since = 0
            return True
        return False

    def mark_dead(self, url: str) -> bool:
        """A request saw the worker fail hard (connection refused/reset): unhealthy at once."""
        w = self._workers.get(url)
        if w is None or not w.healthy:
            return False
        w.failures = max(w.failures, self.config.unhealthy_after)
        w.healthy = False
        w.epoch += 1
        w.kv_since = 0
        return True

    # --- queries ---------------------------------------------------------------------------
    def get(self, url: str) -> Worker | None:
        return self._workers.get(normalize_url(url))

    def all(self) -> list[Worker]:
        return list(self._workers.values())

    def pool(self, role: str) -> list[Worker]:
        """Workers of one role, registration order, healthy or not."""
        return [w for w in self._workers.values() if w.role == role]

    def has_live(self, role: str) -> bool:
        return any(w.healthy and not w.draining for w in self.pool(role))


def _settle(w: Worker) -> None:
    """`draining` from its sources (see the module doc)."""
    w.draining = (w.drain_asked or w.reports_draining or w.switching_to is not None
                  or w.stats.get("switching_to") in ROLES or w.stats.get("draining") is True)


def _check_role(role: str | None) -> None:
    if role is not None and role not in ROLES:
        raise ValueError(f"unknown worker role {role!r}; expected one of {', '.join(ROLES)}")
