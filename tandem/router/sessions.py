"""Which worker each live session was placed on, per pool: the router's memory of sessions.

A session (an `x-session-affinity` id, or a conversation's fingerprint) is bound to the worker its
last committed request in a pool went to. The policy reads the binding as
`RequestInfo.session_home` and the number of live sessions per worker as `WorkerLoad.sessions`,
so it stays a pure function of the snapshot; the router writes the binding when it commits a
decision (tandem/router/router.py).

A session is kept while it sent a request in the last `idle_s` seconds and its client did not say
it ended (`end`: an agent's last turn, hint expect_next_turn_s = 0); the table keeps at most
`capacity` sessions, forgetting the least recently used first. A forgotten session is placed as
a new one (its history, if still cached, then counts through the prefix index).
A kept session counts as live on its worker from each request placed until its turn ends the way
an agent's task ends (`rest`: a turn ending in `stop` without a tool call where tools were
offered, the worker's own rule for releasing a session's KV, tandem/kv/retention.py): it keeps its
home (a later turn, a person's reply, still goes there and counts again) but no longer weighs
against its worker when new sessions are spread. Invariant: `counts` is the number of kept,
counted sessions per worker.

Plain, single-threaded bookkeeping (the gateway uses it from its event loop only). Each gateway
has its own: several gateways agree on where a session's history is through the prefix index,
not through this table.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable


class SessionTable:
    def __init__(self, capacity: int = 1 << 16, idle_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.idle_s = idle_s
        self._clock = clock
        # (pool, session) -> (worker, last use, counted), least recently used first
        self._bound: OrderedDict[tuple[str, str], tuple[str, float, bool]] = OrderedDict()
        self._count: dict[str, Counter] = {}   # pool -> worker -> live (counted) sessions

    def home(self, pool: str, session: str) -> str | None:
        self._expire()
        entry = self._bound.get((pool, session))
        return entry[0] if entry else None

    def counts(self, pool: str) -> Counter:
        """Live sessions per worker of the pool (a copy)."""
        self._expire()
        return Counter(self._count.get(pool, ()))

    def bind(self, pool: str, session: str, worker: str) -> None:
        key = (pool, session)
        old = self._bound.pop(key, None)
        if old is not None:
            self._drop(pool, old)
        self._bound[key] = (worker, self._clock(), True)
        self._count.setdefault(pool, Counter())[worker] += 1
        while len(self._bound) > self.capacity:
            self._pop_oldest()

    def end(self, pool: str, session: str) -> None:
        """The session's last request was placed: forget it (unknown sessions are ignored)."""
        old = self._bound.pop((pool, session), None)
        if old is not None:
            self._drop(pool, old)

    def rest(self, session: str) -> None:
        """The session's turn ended its task: it keeps its home in every pool but stops counting
        (until its next request is placed; unknown sessions are ignored)."""
        for pool in list(self._count):
            entry = self._bound.get((pool, session))
            if entry is not None and entry[2]:
                self._drop(pool, entry)
                self._bound[(pool, session)] = (entry[0], entry[1], False)

    def __len__(self) -> int:
        self._expire()
        return len(self._bound)

    def _expire(self) -> None:
        limit = self._clock() - self.idle_s
        while self._bound and next(iter(self._bound.values()))[1] < limit:
            self._pop_oldest()

    def _pop_oldest(self) -> None:
        (pool, _), entry = self._bound.popitem(last=False)
        self._drop(pool, entry)

    def _drop(self, pool: str, entry: tuple[str, float, bool]) -> None:
        """Uncount an entry (no-op for one that no longer counts)."""
        worker, _, counted = entry
        if not counted:
            return
        counts = self._count[pool]
        counts[worker] -= 1
        if counts[worker] <= 0:
            del counts[worker]
