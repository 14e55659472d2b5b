"""Who leaves the gateway's queue next while every worker is at capacity: a pure policy.

Order: priority bands first (vLLM's convention: lower `priority` first), then, inside a band,
weighted fair queueing across tenants by tokens. A request costs `prompt tokens + min(max_tokens,
output_estimate)`. Each tenant of a band has a virtual clock; the tenant whose head request would
finish first in virtual time (`clock + cost / weight`) goes next, and its clock moves to that
finish. A tenant that starts waiting joins at the band's current virtual time (never behind it),
so idleness earns no credit. Over any interval in which two tenants both have requests waiting,
the tokens served to them differ from their weights' shares by at most one request's cost.
Tags are computed for heads only, so removing a waiting request (its client left) shifts nothing.

Starvation bound across bands (as the engine's --priority-aging-s): a band's effective priority is
its priority minus one level per whole `aging_s` its oldest request has waited, never better
than the best priority waiting; the best effective priority goes next, ties by arrival (the band
whose oldest request came first). A request of priority p therefore waits behind any flood of
priority q < p for at most (p - q) * aging_s, then one release.

Bounds: per tenant at most `max_requests` waiting and `max_tokens` of waiting cost; beyond
either, `push` refuses (the caller answers 429 with Retry-After). `expired` lists requests that
waited longer than `max_wait_s` (the caller answers them 503).

No I/O, no clock of its own: every call that needs the time takes `now`.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FairQueueConfig:
    enabled: bool = True           # --no-fair-queue: requests over capacity get 429 at once
    max_requests: int = 256        # waiting requests per tenant; the next one gets 429
    max_tokens: int | None = None  # waiting cost (tokens) per tenant; None: no bound
    max_wait_s: float = 60.0       # a request waiting longer gets 503
    aging_s: float = 5.0           # one priority level better per this many seconds waited
    output_estimate: int = 512     # max_tokens counts at most this much toward a request's cost
    default_weight: float = 1.0    # a tenant without an entry in `weights`
    weights: tuple[tuple[str, float], ...] = ()   # (tenant, weight): a larger share of the tokens

    def __post_init__(self) -> None:
        if self.max_requests < 1:
            raise ValueError(f"max_requests must be at least 1, got {self.max_requests}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if not self.max_wait_s > 0 or not self.aging_s > 0:
            raise ValueError("max_wait_s and aging_s must be positive")
        if self.output_estimate < 0:
            raise ValueError(f"output_estimate must be >= 0, got {self.output_estimate}")
        for tenant, w in ((None, self.default_weight), *self.weights):
            if not w > 0:
                raise ValueError(f"weight of tenant {tenant or '(default)'} must be positive, got {w}")

    def weight(self, tenant: str) -> float:
        return dict(self.weights).get(tenant, self.default_weight)

    def cost(self, prompt_tokens: int, max_tokens: int | None) -> int:
        out = self.output_estimate if max_tokens is None else min(max_tokens, self.output_estimate)
        return max(1, prompt_tokens + out)


@dataclass(eq=False)
class Entry:
    """One waiting request. `item` is the caller's (the gate's future); identity is the entry."""

    tenant: str
    priority: int
    cost: int
    arrival: float
    item: object = None
    seq: int = 0


@dataclass
class _Tenant:
    queue: deque = field(default_factory=deque)
    clock: float = 0.0      # virtual time its next request starts at (band's scale)


@dataclass
class _Band:
    vtime: float = 0.0
    tenants: dict[str, _Tenant] = field(default_factory=dict)
    by_arrival: dict[int, Entry] = field(default_factory=dict)   # seq -> entry, oldest first


class FairQueue:
    def __init__(self, config: FairQueueConfig) -> None:
        self.config = config
        self._bands: dict[int, _Band] = {}
        self._depth: dict[str, int] = {}     # tenant -> waiting requests (all bands)
        self._tokens: dict[str, int] = {}    # tenant -> waiting cost
        self._seq = itertools.count()

    def __len__(self) -> int:
        return sum(self._depth.values())

    def depth(self, tenant: str) -> int:
        return self._depth.get(tenant, 0)

    def queued_tokens(self, tenant: str) -> int:
        return self._tokens.get(tenant, 0)

    def depths(self) -> dict[str, int]:
        return {t: n for t, n in self._depth.items() if n}

    def admits(self, tenant: str, cost: int) -> bool:
        """Whether `push` would accept a request of `cost` from `tenant` now."""
        c = self.config
        return (self.depth(tenant) < c.max_requests
                and (c.max_tokens is None or self.queued_tokens(tenant) + cost <= c.max_tokens
                     or self.depth(tenant) == 0))   # one request larger than the bound still waits

    def push(self, entry: Entry) -> bool:
        """Queue `entry`; False (and nothing queued) when its tenant's queue is full."""
        if not self.admits(entry.tenant, entry.cost):
            return False
        entry.seq = next(self._seq)
        band = self._bands.setdefault(entry.priority, _Band())
        t = band.tenants.get(entry.tenant)
        if t is None:
            t = band.tenants[entry.tenant] = _Tenant(clock=band.vtime)
        elif not t.queue:
            t.clock = max(t.clock, band.vtime)
        t.queue.append(entry)
        band.by_arrival[entry.seq] = entry
        self._depth[entry.tenant] = self.depth(entry.tenant) + 1
        self._tokens[entry.tenant] = self.queued_tokens(entry.tenant) + entry.cost
        return True

    def remove(self, entry: Entry) -> bool:
        """Take a waiting entry out (its client left, or it expired); False if not waiting."""
        band = self._bands.get(entry.priority)
        if band is None or band.by_arrival.pop(entry.seq, None) is None:
            return False
        t = band.tenants[entry.tenant]
        t.queue.remove(entry)
        self._forget(band, entry)
        return True

    def pop(self, now: float) -> Entry | None:
        """The next request to serve, or None when nothing waits."""
        band = self._next_band(now)
        if band is None:
            return None
        b = self._bands[band]
        name, t = min(((n, t) for n, t in b.tenants.items() if t.queue),
                      key=lambda nt: (self._finish(nt[0], nt[1]), nt[1].queue[0].seq))
        entry = t.queue.popleft()
        b.vtime = max(b.vtime, t.clock)          # the band's time: the start of what it serves
        t.clock = self._finish(name, t, entry)
        del b.by_arrival[entry.seq]
        self._forget(b, entry)
        return entry

    def expired(self, now: float) -> list[Entry]:
        """Waiting entries older than max_wait_s (still queued: the caller removes them)."""
        limit = now - self.config.max_wait_s
        out = []
        for b in self._bands.values():
            for e in b.by_arrival.values():   # oldest first
                if e.arrival > limit:
                    break
                out.append(e)
        return out

    def _finish(self, name: str, t: _Tenant, entry: Entry | None = None) -> float:
        e = entry or t.queue[0]
        return t.clock + e.cost / self.config.weight(name)

    def _next_band(self, now: float) -> int | None:
        bands = [(p, b) for p, b in self._bands.items() if b.by_arrival]
        if not bands:
            return None
        best_present = min(p for p, _ in bands)

        def key(pb: tuple[int, _Band]) -> tuple[float, int]:
            p, b = pb
            oldest = next(iter(b.by_arrival.values()))
            aged = p - (now - oldest.arrival) // self.config.aging_s
            return max(best_present, aged), oldest.seq

        return min(bands, key=key)[0]

    def _forget(self, band: _Band, entry: Entry) -> None:
        self._depth[entry.tenant] -= 1
        self._tokens[entry.tenant] -= entry.cost
        if not self._depth[entry.tenant]:
            del self._depth[entry.tenant], self._tokens[entry.tenant]
        if not band.by_arrival:      # an empty band is forgotten, its virtual time with it
            del self._bands[entry.priority]
