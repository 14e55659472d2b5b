"""How long the decode side's KV pulls take: EngineStats.kv_handoff_stats (types.py).

A pull is timed from the moment the worker side starts it (`HandoffWorker.start_loads`) to the
moment its future completes, on the sink's thread: the transfer itself, the control round trips
and the confirmation, not the engine step that notices it. Failed pulls are counted, not timed:
the source gone or unreachable, or the blocks released because the request was aborted meanwhile.
"""

from __future__ import annotations

import bisect

from tandem.types import KV_HANDOFF_BUCKETS


class HandoffTimes:
    """Cumulative pull counts per bucket, their summed seconds and the failures."""

    def __init__(self) -> None:
        self._counts = [0] * (len(KV_HANDOFF_BUCKETS) + 1)   # the last: slower than every bound
        self._sum_s = 0.0
        self._failed = 0

    def observe(self, seconds: float) -> None:
        # bucket i holds bounds[i-1] < seconds <= bounds[i] (Prometheus' `le`)
        self._counts[bisect.bisect_left(KV_HANDOFF_BUCKETS, seconds)] += 1
        self._sum_s += seconds

    def failed(self) -> None:
        self._failed += 1

    def snapshot(self) -> tuple[float, ...]:
        return (*self._counts, self._sum_s, self._failed)
