"""Which worker holds which KV block hashes: the gateway's view of every worker's prefix cache.

Fed by the workers' KV events. Contract (worker side: `tandem.kv.events.KVEventLog`):

    GET /internal/kv_events?since=SEQ
    -> {"seq": N, "reset": bool,
        "events": [{"seq": n, "type": "stored" | "removed" | "cleared", "block_hashes": ["123", ...]}]}

- `since` is the last `seq` the reader applied (0 at first); the reply holds the events after it,
  oldest first, and `seq` is the newest sequence number covered (the next `since`).
- If the worker no longer has the events after `since` (its log wrapped, or it restarted and its
  counter is behind `since`), it answers `reset: true` with a `cleared` event followed by one
  `stored` event listing every block hash it currently caches.
- Block hashes are `tandem.kv.block_hash` values (unsigned 64-bit), sent as decimal strings
  (ints are accepted too). A `stored` hash is reusable by a request; `removed` means evicted.

The gateway hashes a prompt with the same function, seed, block size and KV partition (the
request's cache salt and tenant: tandem/kv/block_hash.py `cache_keys`), and `match` tells, per
worker, how many *leading* blocks of that chain it holds: another tenant's blocks never match.

The shared KV store (tandem/kvstore: Mooncake Store, which every worker of the cluster can load
from) is one more holder, the pseudo-worker `STORE` ("store"): workers report the blocks they put
there as events of type `store_stored` (and `store_removed`), in their own event stream; they
apply to `STORE`, not to the reporting worker, and a worker's `cleared` leaves them alone. The
store evicts without telling anyone: a worker whose lookup finds a block gone reports it
(`store_removed`, which cuts the store's chain there), and the index keeps at most `store_limit`
of its hashes, forgetting the oldest reported first.

A worker's lower tiers (host memory, disk) are holders of their own, `tier_holder(worker, tier)`;
workers do not report them yet, the simulator does (tandem/sim/fleet.py), and the router reads
them as `WorkerLoad.host_blocks` / `disk_blocks`.

Invariant: `_by_hash[h]` contains worker w exactly when `h in _by_worker[w]`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

STORE = "store"   # the pseudo-worker holding what the shared KV store holds
STORE_EVENTS = {"store_stored": "stored", "store_removed": "removed"}
LOWER_TIERS = ("host", "disk")   # a worker's own tiers below the device


def tier_holder(worker: str, tier: str) -> str:
    """The holder id of a worker's lower tier ("host" or "disk")."""
    return f"{worker}#{tier}"


def leading_blocks(block_hashes: Sequence[int], holders: Mapping[int, set[str]]) -> dict[str, int]:
    """Per holder of block 0, how many leading blocks of `block_hashes` it holds (`holders`:
    block hash -> who holds it)."""
    result: dict[str, int] = {}
    alive: set[str] | None = None
    for i, h in enumerate(block_hashes):
        owners = holders.get(h) or set()
        alive = set(owners) if alive is None else alive & owners
        if not alive:
            break
        for w in alive:
            result[w] = i + 1
    return result


class PrefixIndex:
    """Plain, single-threaded bookkeeping (the gateway mutates it from its event loop only)."""

    def __init__(self, store_limit: int = 1 << 18) -> None:
        self._by_hash: dict[int, set[str]] = {}
        self._by_worker: dict[str, set[int]] = {}
        self._store_order: OrderedDict[int, None] = OrderedDict()   # STORE's hashes, oldest first
        self.store_limit = store_limit

    def stored(self, worker: str, hashes: Iterable[int]) -> None:
        held = self._by_worker.setdefault(worker, set())
        for h in hashes:
            held.add(h)
            self._by_hash.setdefault(h, set()).add(worker)
            if worker == STORE:
                self._store_order[h] = None
                self._store_order.move_to_end(h)
        if worker == STORE and len(self._store_order) > self.store_limit:
            old = []
            while len(self._store_order) > self.store_limit:
                old.append(self._store_order.popitem(last=False)[0])
            self.removed(STORE, old)

    def removed(self, worker: str, hashes: Iterable[int]) -> None:
        held = self._by_worker.get(worker)
        if held is None:
            return
        for h in hashes:
            held.discard(h)
            if worker == STORE:
                self._store_order.pop(h, None)
            owners = self._by_hash.get(h)
            if owners is not None:
                owners.discard(worker)
                if not owners:
                    del self._by_hash[h]

    def clear(self, worker: str) -> None:
        """Forget everything about a worker (cleared event, resync, or the worker left)."""
        self.removed(worker, list(self._by_worker.get(worker, ())))
        self._by_worker.pop(worker, None)

    def apply(self, worker: str, reply: dict) -> int:
        """Apply a /internal/kv_events reply for `worker`; returns the next `since`."""
        for ev in reply.get("events", ()):
            kind = ev.get("type")
            hashes = [int(h) for h in ev.get("block_hashes", ())]
            if kind in STORE_EVENTS:   # blocks of the shared store, reported by this worker
                (self.stored if STORE_EVENTS[kind] == "stored" else self.removed)(STORE, hashes)
            elif kind == "stored":
                self.stored(worker, hashes)
            elif kind == "removed":
                self.removed(worker, hashes)
            elif kind == "cleared":
                self.clear(worker)
        return int(reply["seq"])

    def match(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """Per worker that holds block 0, the number of leading blocks it holds (others: absent)."""
        return leading_blocks(block_hashes, self._by_hash)

    def num_blocks(self, worker: str) -> int:
        return len(self._by_worker.get(worker, ()))

    def workers(self) -> list[str]:
        return sorted(self._by_worker)
