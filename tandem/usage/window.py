"""The rate limiter's decision: a sliding window of one minute over two fixed windows (the
"sliding window counter" Cloudflare and others use), pure arithmetic.

Each limited key (kind, account, model) has one counter set per fixed window of W = 60 s of the
store's clock (window index floor(now / W)): requests, input tokens, output tokens. At `elapsed`
seconds into the current window the amount used "in the last minute" is estimated as

    estimate = previous * (1 - elapsed / W) + current

(the previous window's traffic taken as spread evenly over it). A request costing `cost` is
admitted when, for every limited count, estimate + cost <= limit; then its cost is added to the
current window, in the same atomic step as the check (a Redis Lua script, one SQL transaction),
so two gateways can never both take the last unit. Counts of other kinds are never read.

Errors of the estimate, relative to the true count of the last 60 s: none while traffic is
steady; a burst at the end of the previous window is under-weighted by up to its share of the
window (the worst case admits up to twice the limit over a 60 s span straddling the boundary,
as a fixed window would; a burst inside one window is exact). Output tokens are reserved at
admission and corrected when the request ends (meter.py), so the output count can pass its
limit by the in-flight requests' output beyond their reservations.

`remaining` and `reset` give the `x-ratelimit-*` headers; `wait_s` the Retry-After of a refusal.
The same formulas run in Lua (redis_store.py); the store tests check both give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem.usage.limits import Limit

WINDOW_S = 60.0
DIMENSIONS = ("requests", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class Counts:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def get(self, dim: str) -> int:
        return getattr(self, dim)

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(*(self.get(d) + other.get(d) for d in DIMENSIONS))

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(*(self.get(d) - other.get(d) for d in DIMENSIONS))


@dataclass(frozen=True)
class WindowState:
    """One key's counters as the store read them in the atomic step of an admission: `cur`
    includes the request's cost when `admitted`."""

    now: float          # the store's clock
    index: int          # floor(now / window_s): the current window
    prev: Counts
    cur: Counts
    admitted: bool
    window_s: float = WINDOW_S

    @property
    def elapsed(self) -> float:
        return self.now - self.index * self.window_s


def estimate(prev: int, cur: int, elapsed: float, window_s: float = WINDOW_S) -> float:
    return prev * (1.0 - elapsed / window_s) + cur


def fits(limit: Limit, prev: Counts, cur: Counts, elapsed: float, cost: Counts,
         window_s: float = WINDOW_S) -> bool:
    """Whether `cost` may be added now (the check the stores run atomically)."""
    for dim in DIMENSIONS:
        lim = getattr(limit, dim)
        if lim is not None and estimate(prev.get(dim), cur.get(dim), elapsed, window_s) + cost.get(dim) > lim:
            return False
    return True


def exceeded(limit: Limit, state: WindowState, cost: Counts) -> list[str]:
    """The counts a refused request would have taken over their limit."""
    out = []
    for dim in DIMENSIONS:
        lim = getattr(limit, dim)
        if lim is not None and estimate(state.prev.get(dim), state.cur.get(dim), state.elapsed,
                                        state.window_s) + cost.get(dim) > lim:
            out.append(dim)
    return out


def remaining(limit: int, state: WindowState, dim: str) -> int:
    """What is left of `limit` now (after the request, when admitted), floored at 0."""
    est = estimate(state.prev.get(dim), state.cur.get(dim), state.elapsed, state.window_s)
    return max(0, math.floor(limit - est))


def reset_s(state: WindowState, dim: str) -> float:
    """Seconds until the estimate of `dim` is back to zero (the limit whole again, OpenAI's
    "resets to its initial state"), with no more traffic: the end of the next window when the
    current one has counts, else the end of this one, 0 when neither has any."""
    left = state.window_s - state.elapsed
    if state.cur.get(dim) > 0:
        return left + state.window_s
    if state.prev.get(dim) > 0:
        return left
    return 0.0


def wait_s(limit: int, state: WindowState, dim: str, cost: int) -> float | None:
    """Seconds until `cost` more of `dim` would fit, with no more traffic; None: never (the cost
    alone is over the limit). 0 when it fits now."""
    if cost > limit:
        return None
    w, e = state.window_s, state.elapsed
    prev, cur = state.prev.get(dim), state.cur.get(dim)
    if estimate(prev, cur, e, w) + cost <= limit:
        return 0.0
    room = limit - cost - cur          # what the previous window's weighted share must fall to
    if room >= 0:                      # within this window, as that share decays
        return max(0.0, w * (1.0 - room / prev) - e)
    # only in the next window, as this window's count (then the previous one) decays
    return (w - e) + max(0.0, w * (1.0 - (limit - cost) / cur))
