"""The decode side's KV pull times: buckets (Prometheus `le`), sum, failures, and the worker that
times its pulls from start to completion."""

from __future__ import annotations

import bisect
import time
from concurrent.futures import Future
from types import SimpleNamespace

from tandem.kv.connector import KVLoad
from tandem.transfer.handoff import HandoffWorker
from tandem.transfer.handoff_times import HandoffTimes
from tandem.types import KV_HANDOFF_BUCKETS

N = len(KV_HANDOFF_BUCKETS) + 1


def test_a_time_on_a_bound_counts_in_that_bucket_and_slower_ones_past_the_last():
    t = HandoffTimes()
    t.observe(0.001)    # == the first bound: le="0.001"
    t.observe(0.0011)   # just past it: the second bucket
    t.observe(99.0)     # past every bound
    t.failed()
    snap = t.snapshot()
    assert len(snap) == N + 2
    assert snap[0] == 1 and snap[1] == 1 and snap[N - 1] == 1 and sum(snap[:N]) == 3
    assert snap[N] == 0.001 + 0.0011 + 99.0 and snap[N + 1] == 1


class _Sink:
    def __init__(self) -> None:
        self.futures: list[Future] = []

    def pull_async(self, handle, dst, src) -> Future:
        f: Future = Future()
        self.futures.append(f)
        return f


def test_the_worker_times_each_pull_from_its_start_to_its_end_not_to_the_poll():
    sink = _Sink()
    worker = HandoffWorker(SimpleNamespace(sink=sink, source=None, kind="tcp"))
    try:
        worker.start_loads([KVLoad("a", 0, (1, 2), source="h"), KVLoad("b", 0, (3,), source="h")])
        assert worker.poll().loaded == [] and worker.busy()
        time.sleep(0.03)
        sink.futures[0].set_result(None)          # a: pulled after ~30 ms
        sink.futures[1].set_exception(OSError("link down"))
        time.sleep(0.5)                           # the engine notices later: not counted
        events = worker.poll()
        assert events.loaded == ["a"] and events.failed == {"b": "link down"} and not worker.busy()
        snap = worker.handoff_stats()
        assert sum(snap[:N]) == 1 and 0.03 <= snap[N] < 0.5 and snap[N + 1] == 1
        assert snap[bisect.bisect_left(KV_HANDOFF_BUCKETS, snap[N])] == 1   # its bucket
    finally:
        worker._release_pool.shutdown()
