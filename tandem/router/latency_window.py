"""Quantiles of a cumulative latency histogram over a window: the difference of two readings.

A reading is the histogram's cumulative bucket counts `((upper_bound, count), ...)` in increasing
bound order, the last bound +inf (Prometheus' `le` buckets). `HistogramWindow.advance(reading)`
returns the counts added since the previous reading; `quantile` interpolates linearly inside the
bucket that holds the rank (as Prometheus' histogram_quantile does), and answers the last finite
bound for a rank in the +inf bucket.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

Reading = tuple[tuple[float, float], ...]


def quantile(window: Reading, q: float) -> float | None:
    """The q-quantile of the window's observations; None when it holds none."""
    total = window[-1][1] if window else 0
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in window:
        if count >= rank and count > below:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


@dataclass
class HistogramWindow:
    _last: dict[float, float] = field(default_factory=dict)

    def advance(self, reading: Reading) -> Reading:
        """Counts observed since the previous reading (all of them the first time)."""
        out = tuple((le, count - self._last.get(le, 0.0)) for le, count in reading)
        self._last = dict(reading)
        return out
