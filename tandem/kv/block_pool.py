"""The block pool: bookkeeping of KV blocks (mechanism only; the scheduler decides).

Invariants:
- A block is either referenced (ref_count > 0) or in the free queue, never both.
- The free queue is in eviction order: least recently freed first. Blocks freed together
  are queued tail-first, so a sequence's last blocks are evicted before its prefix.
- A free block may still hold a cached prefix (its hash is in `cached`); taking it for new
  data evicts that entry. A cache hit on a free block takes it out of the queue.
- Each hash maps to at most one block.
- Retention (tandem/kv/retention.py decides): a block listed by a retention hold has
  `retained` > 0 and, while free, waits in the retained queue, taken only once the free queue is
  empty; a retained block taken so leaves every hold and is recorded in `demoted` (its hash, the
  hold's tag and its position in the hold's sequence) for the caller to copy down a tier before the step overwrites it. A `cold`
  block (its session ended) goes to the head of the free queue whenever it is free.
- `num_retained` counts the blocks with `retained` > 0.
- Each hold has a priority (its turn's; lower is better). While every hold's priority is better
  than a request's, the free retained blocks are not the request's to take at admission
  (`protects`): a flood of worse-priority work does not overwrite better-priority sessions' KV.
"""

from __future__ import annotations

import gc
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tandem.kv.events import KVEventLog


@dataclass(slots=True)
class KVBlock:
    block_id: int
    ref_count: int = 0
    block_hash: int | None = None  # set while the block holds a full, cached block of tokens
    retained: int = 0              # retention holds listing it
    cold: bool = False             # its session ended: first out once free (until used again)


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
        self._retained_free: OrderedDict[int, None] = OrderedDict()   # free, retained: taken last
        self._holds: dict[str, dict[int, int]] = {}     # hold -> its block ids -> their positions
        self._tags: dict[str, object] = {}              # hold -> what the caller tagged it with
        self._held_by: dict[int, set[str]] = {}         # block id -> holds listing it
        self._hold_priority: dict[str, int] = {}        # hold -> its turn's priority
        self._priorities: Counter[int] = Counter()      # holds per priority
        self.num_retained = 0
        self.num_retained_evicted = 0                   # cumulative
        # retained blocks taken since the caller last drained it: (block id, hash, hold's tag, the
        # block's index in the hold's sequence: a shared prefix's blocks are keyed by position)
        self.demoted: list[tuple[int, int, object, int]] = []

    @property
    def num_free(self) -> int:
        """Blocks that can be taken now, evicting cached content (retained last) if needed."""
        return len(self._free) + len(self._retained_free)

    @property
    def num_unretained_free(self) -> int:
        """Free blocks no hold lists (taken before any retained one)."""
        return len(self._free)

    def protects(self, priority: int) -> bool:
        """Whether the free retained blocks are kept from a request admitted at `priority`: every
        hold's priority is better (lower) than it."""
        return bool(self._priorities) and priority > max(self._priorities)

    @property
    def num_cached(self) -> int:
        return len(self.cached)

    def usage(self) -> float:
        """Fraction of blocks referenced by live requests."""
        return 1.0 - self.num_free / self.num_blocks

    def take(self, n: int) -> list[KVBlock]:
        """Take n blocks from the head of the free queue (caller checked num_free)."""
        if n > self.num_free:
            raise RuntimeError(f"asked for {n} blocks, only {self.num_free} free")
        taken: list[KVBlock] = []
        evicted: list[int] = []
        for _ in range(n):
            if self._free:
                block_id, _ = self._free.popitem(last=False)
            else:
                block_id, _ = self._retained_free.popitem(last=False)
                self._evict_retained(self.blocks[block_id])
            block = self.blocks[block_id]
            block.cold = False
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
                if block.retained:
                    del self._retained_free[block.block_id]
                else:
                    del self._free[block.block_id]
            block.ref_count += 1
            block.cold = False

    def release(self, blocks: Sequence[KVBlock]) -> None:
        """Drop one reference from each block; blocks are given in sequence order."""
        for block in reversed(blocks):
            block.ref_count -= 1
            if block.ref_count < 0:
                raise RuntimeError(f"block {block.block_id} released more often than taken")
            if block.ref_count == 0:
                if block.retained:
                    self._retained_free[block.block_id] = None
                else:
                    self._free[block.block_id] = None
        self._to_head(blocks)

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
        if self.num_free != self.num_blocks:
            return False
        for hold in list(self._holds):
            self.unretain(hold)
        for block in self.blocks:
            block.block_hash = None
            block.cold = False
        self.cached.clear()
        if self.events is not None:
            self.events.append("cleared", ())
        return True

    def cached_hashes(self) -> tuple[int, ...]:
        return tuple(self.cached)

    # --- retention (tandem/kv/retention.py decides; tandem/kv/session_retention.py drives) ---------
    def retain(self, hold: str, blocks: Sequence[KVBlock], tag: object = None, priority: int = 0) -> None:
        """List `blocks` (in sequence order, each holding a cached prefix) under a new hold of
        `priority`: while free they are taken only after every unretained free block."""
        assert hold not in self._holds, f"hold {hold!r} exists"
        ids: dict[int, int] = {}
        for pos in reversed(range(len(blocks))):   # into the retained queue tail-first, as release does
            block = blocks[pos]
            if block.block_id in ids or block.block_hash is None:
                continue
            ids[block.block_id] = pos
            block.cold = False
            block.retained += 1
            self._held_by.setdefault(block.block_id, set()).add(hold)
            if block.retained == 1:
                self.num_retained += 1
                if block.ref_count == 0:
                    del self._free[block.block_id]
                    self._retained_free[block.block_id] = None
        self._holds[hold] = dict(reversed(ids.items()))
        self._tags[hold] = tag
        self._hold_priority[hold] = priority
        self._priorities[priority] += 1

    def unretain(self, hold: str, cold: bool = False) -> None:
        """End a hold (unknown holds are ignored). Blocks no other hold lists rejoin the free queue:
        at its head when `cold` (the session is idle past its retention), else at its tail."""
        ids = self._holds.pop(hold, None)
        self._tags.pop(hold, None)
        if ids is None:
            return
        priority = self._hold_priority.pop(hold)
        self._priorities[priority] -= 1
        if not self._priorities[priority]:
            del self._priorities[priority]
        released: list[KVBlock] = []
        for block_id in ids:
            block = self.blocks[block_id]
            self._drop_hold(block_id, hold)
            block.retained -= 1
            if block.retained == 0:
                self.num_retained -= 1
                released.append(block)
        for block in reversed(released):
            if block.ref_count == 0:
                del self._retained_free[block.block_id]
                self._free[block.block_id] = None
        if cold:
            self.mark_cold(released)

    def mark_cold(self, blocks: Sequence[KVBlock], own_refs: int = 0) -> None:
        """Their session ended: blocks no other request or hold uses (at most `own_refs`
        references: the caller's) go first under pressure (now if free, else once released), the
        sequence's last block first. A block another session shares (a system prompt) is left
        where it is."""
        for block in blocks:
            if not block.retained and block.ref_count <= own_refs:
                block.cold = True
        self._to_head(blocks)

    @property
    def num_holds(self) -> int:
        return len(self._holds)

    def hold_blocks(self, hold: str) -> int:
        """Blocks the hold still lists (retained blocks taken under pressure leave it)."""
        return len(self._holds.get(hold, ()))

    def new_for_retention(self, blocks: Sequence[KVBlock]) -> int:
        """How many of `blocks` no hold lists yet (what retaining them adds to num_retained)."""
        return len({b.block_id for b in blocks if not b.retained and b.block_hash is not None})

    def _to_head(self, blocks: Sequence[KVBlock]) -> None:
        for block in blocks:   # in sequence order: the last one ends at the head
            if block.cold and block.ref_count == 0 and not block.retained:
                self._free.move_to_end(block.block_id, last=False)

    def _drop_hold(self, block_id: int, hold: str) -> None:
        holders = self._held_by.get(block_id)
        if holders is not None:
            holders.discard(hold)
            if not holders:
                del self._held_by[block_id]

    def _evict_retained(self, block: KVBlock) -> None:
        """A retained block is taken for new data: it leaves its holds; its content is recorded
        for demotion."""
        holders = self._held_by.pop(block.block_id, set())
        first = next(iter(sorted(holders))) if holders else None
        tag = self._tags.get(first) if first is not None else None
        pos = self._holds[first].get(block.block_id, 0) if first is not None else 0
        for hold in holders:
            self._holds[hold].pop(block.block_id, None)
        if block.block_hash is not None:
            self.demoted.append((block.block_id, block.block_hash, tag, pos))
        block.retained = 0
        self.num_retained -= 1
        self.num_retained_evicted += 1
