"""Prompts the router sent to each worker lately: what the worker will cache, before its KV
events say so.

The prefix index (prefix_index.py) learns a worker's cache from the worker's KV events, polled
every `poll_interval_s` (0.5 s by default); an agent's turns and a harness's new sessions come
faster than that. Without this table the router saw no hit on the worker it had just sent a
system prompt to, and placed the next session as if nothing were cached there (the near-best
rule then compared a stale view: eight sessions sent one after another split 5/3 when the
polls fell badly). As SGLang's cache-aware router and Dynamo's KV router do, a committed route
counts the request's full prompt blocks as held by its worker at once; the worker's events
confirm them (or report them evicted) within a poll or two. This also covers a prompt still being
computed: the worker holds the next prompt that shares it until its blocks are cached
(Scheduler._continues_in_flight), so a session arriving meanwhile is better placed there than
where it would compute the shared prefix a second time (the simulator models both).

A routed entry lasts `ttl_s`: long enough for the events of a prompt that queued a while to
arrive, short enough that a request that failed or was never cached (a worker without prefix
caching) misleads for seconds only. The router reads `match` beside the index's and takes the
larger count per worker. At most `capacity` (worker, block) entries are kept, oldest dropped
first.

Plain, single-threaded bookkeeping with an injected clock (the gateway's event loop only).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from tandem.router.prefix_index import leading_blocks


class RoutedPrefixes:
    def __init__(self, ttl_s: float = 10.0, capacity: int = 1 << 18,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._clock = clock
        # (worker, block hash) -> expiry time, the oldest routed first
        self._until: OrderedDict[tuple[str, int], float] = OrderedDict()
        self._by_hash: dict[int, set[str]] = {}

    def routed(self, worker: str, block_hashes: Sequence[int]) -> None:
        """`worker` was sent a prompt whose full blocks are `block_hashes` (in order)."""
        until = self._clock() + self.ttl_s
        for h in block_hashes:
            key = (worker, h)
            self._until.pop(key, None)
            self._until[key] = until
            self._by_hash.setdefault(h, set()).add(worker)
        while len(self._until) > self.capacity:
            self._drop_oldest()

    def match(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """Per worker routed block 0 of `block_hashes`, the number of leading blocks it was routed."""
        self._expire()
        return leading_blocks(block_hashes, self._by_hash)

    def forget(self, worker: str) -> None:
        """The worker restarted or left: nothing routed to it is cached there."""
        for key in [k for k in self._until if k[0] == worker]:
            del self._until[key]
            self._unlink(key)

    def __len__(self) -> int:
        self._expire()
        return len(self._until)

    def _expire(self) -> None:
        now = self._clock()
        while self._until and next(iter(self._until.values())) <= now:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        key, _ = self._until.popitem(last=False)
        self._unlink(key)

    def _unlink(self, key: tuple[str, int]) -> None:
        worker, h = key
        owners = self._by_hash.get(h)
        if owners is not None:
            owners.discard(worker)
            if not owners:
                del self._by_hash[h]
