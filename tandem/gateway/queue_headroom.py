"""The gateway's answer to the queue's `headroom()`: queued work is taken only while the pools
can absorb it without hurting interactive traffic.

Headroom = some live worker of the entry pool (prefill workers, else colocated ones) has at most
`max_prefill_tokens` estimated prompt tokens waiting to be computed (the token-aware load,
tandem.router.load_tracker) and reports nobody waiting for admission; and, when there are decode
workers, some live decode worker reports nobody waiting either. Interactive requests never wait
for queued ones: they are routed as always, and a queued request that meets a full pool (429 or
503) goes back to the queue.
"""

from __future__ import annotations

from collections.abc import Callable

from tandem.gateway.registry import Registry, Worker
from tandem.router.load_tracker import LoadTracker


def _live(workers: list[Worker]) -> list[Worker]:
    return [w for w in workers if w.healthy and not w.draining]


def _idle_queue(w: Worker) -> bool:
    return int(w.stats.get("num_waiting") or 0) == 0


def has_headroom(registry: Registry, tracker: LoadTracker, max_prefill_tokens: int) -> bool:
    entry = _live(registry.pool("prefill")) or _live(registry.pool("both"))
    if not any(tracker.load(w.url).prefill_tokens <= max_prefill_tokens and _idle_queue(w)
               for w in entry):
        return False
    decode = _live(registry.pool("decode"))
    return not registry.pool("decode") or any(_idle_queue(w) for w in decode)


def gateway_headroom(registry: Registry, tracker: LoadTracker,
                     max_prefill_tokens: int) -> Callable[[], bool]:
    return lambda: has_headroom(registry, tracker, max_prefill_tokens)
