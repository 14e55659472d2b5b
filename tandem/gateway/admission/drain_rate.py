"""How fast the gateway's queue drains, in tokens per second: the basis of a 429's Retry-After.

A sliding window of (time, cost) of the requests released from the queue. A tenant refused
because its queue is full is told to come back when the tokens ahead of it (its own waiting
cost) would drain at its share of that rate: `ahead / (rate * share)` seconds, whole, at least
1 and at most `cap_s`; with nothing drained in the window the answer is `cap_s` (the queue is
stuck behind long requests, or has just filled).
"""

from __future__ import annotations

import math
from collections import deque


class DrainRate:
    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._sum = 0

    def record(self, now: float, tokens: int) -> None:
        self._events.append((now, tokens))
        self._sum += tokens
        self._trim(now)

    def tokens_per_s(self, now: float) -> float:
        self._trim(now)
        if not self._events:
            return 0.0
        return self._sum / max(1.0, now - self._events[0][0], min(self.window_s, 1.0))

    def retry_after_s(self, now: float, ahead_tokens: int, share: float, cap_s: float) -> int:
        rate = self.tokens_per_s(now) * share
        if rate <= 0:
            return max(1, math.ceil(cap_s))
        return int(min(max(1, math.ceil(ahead_tokens / rate)), max(1, math.ceil(cap_s))))

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_s:
            self._sum -= self._events.popleft()[1]
