"""The simulation clock and its event queue.

Invariant: events run in (time, insertion order): two events at the same time run in the order
they were scheduled, so a run is deterministic. Time never goes backwards; an event may schedule
others at the current time or later, never earlier.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


class EventLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.processed = 0

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Run `fn` at time `t` (>= now)."""
        if t < self.now:
            raise ValueError(f"event at {t} is before the clock ({self.now})")
        heapq.heappush(self._queue, (t, self._seq, fn))
        self._seq += 1

    def after(self, dt: float, fn: Callable[[], None]) -> None:
        self.at(self.now + max(0.0, dt), fn)

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: float = float("inf"), max_events: int | None = None) -> None:
        """Run events in order until the queue is empty, the next event is after `until`, or
        `max_events` have run."""
        n = 0
        while self._queue and self._queue[0][0] <= until:
            if max_events is not None and n >= max_events:
                return
            t, _, fn = heapq.heappop(self._queue)
            self.now = t
            fn()
            n += 1
            self.processed += 1
