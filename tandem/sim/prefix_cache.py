"""A worker's device KV blocks as the simulator keeps them: counts and hashes, no tensors.

Blocks are either free, held by live requests (hashed prompt blocks, shared by reference count,
or anonymous: the parts of a request that are not a full computed prompt block) or cached
(hashed, reference count 0, evictable in LRU order, as tandem/kv/block_pool.py keeps them).

Invariant: anonymous + referenced + cached <= capacity, and a hash is referenced or cached,
never both. Every hash that becomes reusable is reported to `on_stored`, every evicted one to
`on_removed` (the gateway's prefix index is fed from these, as from a worker's KV events).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

Hashes = Callable[[list[int]], None]


class PrefixCache:
    def __init__(self, capacity_blocks: int, on_stored: Hashes | None = None,
                 on_removed: Hashes | None = None) -> None:
        self.capacity = capacity_blocks
        self._ref: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._held: dict[str, tuple[list[int], int]] = {}   # request -> (referenced hashes, anonymous)
        self._anon = 0
        self.on_stored = on_stored or (lambda hs: None)
        self.on_removed = on_removed or (lambda hs: None)

    # --- reading ---------------------------------------------------------------------------
    def match(self, hashes: Sequence[int]) -> int:
        """Leading blocks of `hashes` held (referenced or cached)."""
        n = 0
        for h in hashes:
            if h not in self._ref and h not in self._lru:
                break
            n += 1
        return n

    def free_blocks(self) -> int:
        return self.capacity - self._anon - len(self._ref) - len(self._lru)

    def live_blocks(self) -> int:
        return self._anon + len(self._ref)

    def usage(self) -> float:
        return self.live_blocks() / self.capacity if self.capacity else 0.0

    def cached_hashes(self) -> list[int]:
        return list(self._ref) + list(self._lru)

    # --- changing --------------------------------------------------------------------------
    def allocate(self, request_id: str, hit: Sequence[int], new_blocks: int) -> bool:
        """Reference the `hit` hashes (leading, held) and take `new_blocks` anonymous blocks,
        evicting cached blocks as needed; False (nothing changed) when they do not fit."""
        reuse_cached = sum(1 for h in hit if h in self._lru)
        if self.free_blocks() + len(self._lru) - reuse_cached < new_blocks:
            return False
        for h in hit:
            self._ref_hash(h)
        self._evict(new_blocks - self.free_blocks())
        self._anon += new_blocks
        refs, anon = self._held.get(request_id, ([], 0))
        self._held[request_id] = (refs + list(hit), anon + new_blocks)
        return True

    def publish(self, request_id: str, hashes: Sequence[int]) -> None:
        """The request's blocks `hashes` are computed: anonymous blocks become hashed, reusable.
        A hash already held (computed twice at once) frees the request's duplicate."""
        refs, anon = self._held[request_id]
        stored = []
        for h in hashes:
            if anon <= 0:
                break
            if h in refs:
                continue
            anon -= 1
            self._anon -= 1
            if h not in self._ref and h not in self._lru:
                stored.append(h)
            self._ref_hash(h)
            refs.append(h)
        self._held[request_id] = (refs, anon)
        if stored:
            self.on_stored(stored)

    def release(self, request_id: str) -> None:
        """The request ends here: its hashed blocks stay cached (most recent last), the rest frees."""
        refs, anon = self._held.pop(request_id, ([], 0))
        self._anon -= anon
        for h in refs:
            self._ref[h] -= 1
            if self._ref[h] == 0:
                del self._ref[h]
                self._lru[h] = None

    def clear(self) -> None:
        """A restart: everything cached is gone (live requests must have been released)."""
        gone = list(self._lru)
        self._lru.clear()
        if gone:
            self.on_removed(gone)

    def _ref_hash(self, h: int) -> None:
        if h in self._lru:
            del self._lru[h]
        self._ref[h] = self._ref.get(h, 0) + 1

    def _evict(self, n: int) -> None:
        gone = [self._lru.popitem(last=False)[0] for _ in range(max(0, n))]
        if gone:
            self.on_removed(gone)
