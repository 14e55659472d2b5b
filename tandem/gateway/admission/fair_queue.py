"""Who leaves the gateway's queue next while every worker is at capacity: a pure policy.

Order: weighted fair queueing across tenants by tokens first, then, inside the chosen tenant's
own queue, its priority order. A request's `priority` comes from its client, so it orders only
that tenant's own requests: no priority buys a tenant more than its weighted share.

Across tenants: a request costs `prompt tokens + min(max_tokens, output_estimate)`. Each tenant
has a virtual clock; the tenant whose head request (below) would finish first in virtual time
(`clock + cost / weight`) goes next, ties by the head's arrival, and its clock moves to that
finish. The queue's virtual time is the start of the last request served (forgotten, with the
clocks, when the queue empties); a tenant that starts waiting joins at it (never behind it), so
idleness earns no credit. Over any interval in which
two tenants both have requests waiting, the tokens served to them, each over its weight, differ
by at most one request's cost over each weight. Tags are computed for heads only, when popping,
so removing a waiting request (its client left) shifts nothing.

Inside a tenant: lower `priority` first (vLLM's convention), ties by arrival, with aging (as the
engine's --priority-aging-s): a request's effective priority is its priority minus one level per
whole `aging_s` it has waited, never better than the best priority that tenant has waiting; the
tenant's head is its best effective priority, ties by arrival. A request of priority p therefore waits behind its own tenant's flood of
priority q < p for at most (p - q) * aging_s, then until its tenant's next turn; other tenants'
requests never delay it more than their weighted share.

Bounds: per tenant at most `max_requests` waiting and `max_tokens` of waiting cost; beyond
either, `push` refuses (the caller answers 429 with Retry-After). `expired` lists requests that
waited longer than `max_wait_s` (the caller answers them 503).

No I/O, no clock of its own: every call that needs the time takes `now`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
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
    clock: float = 0.0     # virtual time its next request starts at
    # priority -> (seq -> entry), oldest first; an emptied priority is dropped
    bands: dict[int, dict[int, Entry]] = field(default_factory=dict)


class FairQueue:
    def __init__(self, config: FairQueueConfig) -> None:
        self.config = config
        self._vtime = 0.0                        # start of the last request served
        self._tenants: dict[str, _Tenant] = {}   # waiting tenants, and idle ones whose clock is
                                                 # still ahead of the virtual time
        self._by_arrival: dict[int, Entry] = {}  # seq -> every waiting entry, oldest first
        self._depth: dict[str, int] = {}         # tenant -> waiting requests
        self._tokens: dict[str, int] = {}        # tenant -> waiting cost
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._by_arrival)

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
        t = self._tenants.get(entry.tenant)
        if t is None:
            t = self._tenants[entry.tenant] = _Tenant(clock=self._vtime)
        elif not t.bands:
            t.clock = max(t.clock, self._vtime)   # joins at the current virtual time: no credit
        t.bands.setdefault(entry.priority, {})[entry.seq] = entry
        self._by_arrival[entry.seq] = entry
        self._depth[entry.tenant] = self.depth(entry.tenant) + 1
        self._tokens[entry.tenant] = self.queued_tokens(entry.tenant) + entry.cost
        return True

    def remove(self, entry: Entry) -> bool:
        """Take a waiting entry out (its client left, or it expired); False if not waiting."""
        if self._by_arrival.get(entry.seq) is not entry:
            return False
        self._take(entry)
        return True

    def peek(self, now: float, eligible: Callable[[Entry], bool] | None = None) -> Entry | None:
        """The request `pop(now, eligible)` would return, left waiting."""
        heads = [(name, t, self._head(t, now)) for name, t in self._tenants.items() if t.bands]
        heads.sort(key=lambda h: (self._finish(h[0], h[1], h[2]), h[2].seq))
        return next((h[2] for h in heads if eligible is None or eligible(h[2])), None)

    def pop(self, now: float, eligible: Callable[[Entry], bool] | None = None) -> Entry | None:
        """The next request to serve: the first tenant's head in fair order, among heads that
        are `eligible` (all by default); None when none is."""
        entry = self.peek(now, eligible)
        if entry is None:
            return None
        name, t = entry.tenant, self._tenants[entry.tenant]
        self._vtime = max(self._vtime, t.clock)   # the start of what it serves
        t.clock = self._finish(name, t, entry)
        self._take(entry)
        for idle in [n for n, x in self._tenants.items() if not x.bands and x.clock <= self._vtime]:
            del self._tenants[idle]                # it would rejoin at the virtual time anyway
        return entry

    def expired(self, now: float) -> list[Entry]:
        """Waiting entries older than max_wait_s (still queued: the caller removes them)."""
        limit = now - self.config.max_wait_s
        out = []
        for e in self._by_arrival.values():   # oldest first
            if e.arrival > limit:
                break
            out.append(e)
        return out

    def _finish(self, name: str, t: _Tenant, entry: Entry) -> float:
        return t.clock + entry.cost / self.config.weight(name)

    def _head(self, t: _Tenant, now: float) -> Entry:
        """The tenant's next request: best aged priority, ties by arrival. Within one priority the
        oldest entry has both the best aged priority and the earliest arrival, so only each
        priority's oldest entry is a candidate."""
        best_present = min(t.bands)
        aging_s = self.config.aging_s

        def key(e: Entry) -> tuple[int, int]:
            levels = int(max(0.0, now - e.arrival) // aging_s)
            return max(best_present, e.priority - levels), e.seq

        return min((next(iter(b.values())) for b in t.bands.values()), key=key)

    def _take(self, entry: Entry) -> None:
        del self._by_arrival[entry.seq]
        t = self._tenants[entry.tenant]
        band = t.bands[entry.priority]
        del band[entry.seq]
        if not band:
            del t.bands[entry.priority]
        self._depth[entry.tenant] -= 1
        self._tokens[entry.tenant] -= entry.cost
        if not self._depth[entry.tenant]:
            del self._depth[entry.tenant], self._tokens[entry.tenant]
            if t.clock <= self._vtime:   # it would rejoin at the virtual time anyway
                del self._tenants[entry.tenant]
        if not self._by_arrival:         # an empty queue forgets its virtual time and clocks
            self._vtime = 0.0
            self._tenants.clear()
