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

The gateway hashes a prompt with the same function, seed, block size and cache salt, and
`match` tells, per worker, how many *leading* blocks of that chain it holds.

Invariant: `_by_hash[h]` contains worker w exactly when `h in _by_worker[w]`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class PrefixIndex:
    """Plain, single-threaded bookkeeping (the gateway mutates it from its event loop only)."""

    def __init__(self) -> None:
        self._by_hash: dict[int, set[str]] = {}
        self._by_worker: dict[str, set[int]] = {}

    def stored(self, worker: str, hashes: Iterable[int]) -> None:
        held = self._by_worker.setdefault(worker, set())
        for h in hashes:
            held.add(h)
            self._by_hash.setdefault(h, set()).add(worker)

    def removed(self, worker: str, hashes: Iterable[int]) -> None:
        held = self._by_worker.get(worker)
        if held is None:
            return
        for h in hashes:
            held.discard(h)
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
            if kind == "stored":
                self.stored(worker, hashes)
            elif kind == "removed":
                self.removed(worker, hashes)
            elif kind == "cleared":
                self.clear(worker)
        return int(reply["seq"])

    def match(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """Per worker that holds block 0, the number of leading blocks it holds (others: absent)."""
        result: dict[str, int] = {}
        alive: set[str] | None = None
        for i, h in enumerate(block_hashes):
            owners = self._by_hash.get(h)
            alive = set(owners or ()) if alive is None else alive & (owners or set())
            if not alive:
                break
            for w in alive:
                result[w] = i + 1
        return result

    def num_blocks(self, worker: str) -> int:
        return len(self._by_worker.get(worker, ()))

    def workers(self) -> list[str]:
        return sorted(self._by_worker)
