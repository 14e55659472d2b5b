"""The block pool: bookkeeping of KV blocks (mechanism only; the scheduler decides).

Invariants:
- A block is either referenced (ref_count > 0) or in the free queue, never both.
- The free queue is in eviction order: least recently freed first. Blocks freed together
  are queued tail-first, so a sequence's last blocks are evicted before its prefix.
- A free block may still hold a cached prefix (its hash is in `cached`); taking it for new
  data evicts that entry. A cache hit on a free block takes it out of the queue.
- Each hash maps to at most one block.
"""

from __future__ import annotations

import gc
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tandem.kv.events import KVEventLog


@dataclass(slots=True)
class KVBlock:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None  # set while the block holds a full, cached block of tokens


def _new_blocks(num_blocks: int) -> list[KVBlock]:
    """num_blocks long-lived objects at once (thousands for a default cache) with the cyclic
    garbage collector paused, so that allocating them does not set off a full pass over the
    process's heap (~80 ms with torch loaded, measured on a 5,400-block pool). They hold no
    reference cycles; the collector's state is restored after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return [KVBlock(i) for i in range(num_blocks)]
    finally:
        if was_enabled:
            gc.enable()


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool = True,
                 events: KVEventLog | None = None) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = _new_blocks(num_blocks)
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        self.events = events

    @property
    def num_free(self) -> int:
        """Blocks that can be taken now, evicting cached content if needed."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self.cached)

    def usage(self) -> float:
        """Fraction of blocks referenced by live requests."""
        return 1.0 - len(self._free) / self.num_blocks

    def take(self, n: int) -> list[KVBlock]:
        """Take n blocks from the head of the free queue (caller checked num_free)."""
        if n > len(self._free):
            raise RuntimeError(f"asked for {n} blocks, only {len(self._free)} free")
        taken: list[KVBlock] = []
        evicted: list[int] = []
        for _ in range(n):
            block_id, _ = self._free.popitem(last=False)
            block = self.blocks[block_id]
            if block.block_hash is not None:
                evicted.append(block.block_hash)
                del self.cached[block.block_hash]
                block.block_hash = None
            block.ref_count = 1
            taken.append(block)
        if evicted and self.events is not None:
            self.events.append("removed", tuple(evicted))
        return taken

    def lookup(self, block_hash: int) -> KVBlock | None:
        block_id = self.cached.get(block_hash)
        return None if block_id is None else self.blocks[block_id]

    def cached_prefix(self, block_hashes: Iterable[int]) -> list[KVBlock]:
        """The cached blocks of the leading run of `block_hashes` (up to the first one not
        cached); no reference taken."""
        hits: list[KVBlock] = []
        for block_hash in block_hashes:
            block = self.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Add a reference to each block (cache hits), taking free ones out of the queue."""
        for block in blocks:
            if block.ref_count == 0:
                del self._free[block.block_id]
            block.ref_count += 1

    def release(self, blocks: Sequence[KVBlock]) -> None:
        """Drop one reference from each block; blocks are given in sequence order."""
        for block in reversed(blocks):
            block.ref_count -= 1
            if block.ref_count < 0:
                raise RuntimeError(f"block {block.block_id} released more often than taken")
            if block.ref_count == 0:
                self._free[block.block_id] = None

    def cache(self, blocks: Sequence[KVBlock], hashes: Sequence[int]) -> None:
        """Mark full blocks as holding the prefix with these hashes.

        A hash already held by another block keeps its first block; the duplicate stays
        uncached and is freed normally (two requests computed the same block at once).
        """
        if not self.enable_caching:
            return
        stored: list[int] = []
        for block, block_hash in zip(blocks, hashes):
            if block.block_hash is not None or block_hash in self.cached:
                continue
            block.block_hash = block_hash
            self.cached[block_hash] = block.block_id
            stored.append(block_hash)
        if stored and self.events is not None:
            self.events.append("stored", tuple(stored))

    def reset_cache(self) -> bool:
        """Forget every cached prefix; refuses (False) while any block is referenced."""
        if len(self._free) != self.num_blocks:
            return False
        for block in self.blocks:
            block.block_hash = None
        self.cached.clear()
        if self.events is not None:
            self.events.append("cleared", ())
        return True

    def cached_hashes(self) -> tuple[int, ...]:
        return tuple(self.cached)
