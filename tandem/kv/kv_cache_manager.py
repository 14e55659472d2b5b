"""The scheduler's only door to the KV cache: prefix lookup, allocation, caching, freeing.

The manager keeps, per request, its block list (in sequence order) and the chained hashes
of its full blocks. It never decides who runs; it answers whether blocks are available.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.kv.block_hash import Partition, hash_request_blocks
from tandem.kv.block_pool import BlockPool, KVBlock
from tandem.kv.events import KVEventLog


@dataclass(frozen=True)
class PrefixHit:
    blocks: tuple[KVBlock, ...]  # cached blocks holding the request's first tokens
    num_tokens: int              # = len(blocks) * block_size


NO_HIT = PrefixHit((), 0)


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True,
                 hash_seed: int = 0, events: KVEventLog | None = None) -> None:
        self.block_size = block_size
        self.hash_seed = hash_seed
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching, events)
        self._blocks: dict[str, list[KVBlock]] = {}
        self._hashes: dict[str, list[int]] = {}
        self.prefix_queries = 0  # tokens looked up
        self.prefix_hits = 0     # tokens found

    # --- hashes -------------------------------------------------------------------
    def block_hashes(self, request_id: str, token_ids: Sequence[int], extra_keys: Partition | tuple) -> list[int]:
        """Hashes of all full blocks of token_ids, extending what was hashed before."""
        hashes = self._hashes.setdefault(request_id, [])
        if len(hashes) < len(token_ids) // self.block_size:
            parent = hashes[-1] if hashes else None
            hashes.extend(hash_request_blocks(token_ids, self.block_size, extra_keys,
                                              self.hash_seed, start=len(hashes), parent=parent))
        return hashes

    # --- admission ----------------------------------------------------------------
    def lookup_prefix(self, request_id: str, token_ids: Sequence[int], extra_keys: Partition | tuple) -> PrefixHit:
        """Longest run of cached blocks at the start of token_ids, leaving one token to compute."""
        if not self.enable_caching:
            return NO_HIT
        hashes = self.block_hashes(request_id, token_ids, extra_keys)
        max_blocks = (len(token_ids) - 1) // self.block_size
        hits = self.pool.cached_prefix(hashes[:max_blocks])
        return PrefixHit(tuple(hits), len(hits) * self.block_size)

    def record_lookup(self, num_tokens: int, hit_tokens: int) -> None:
        """Count one admitted lookup (failed admission attempts are retried, not counted)."""
        self.prefix_queries += num_tokens
        self.prefix_hits += hit_tokens

    def can_allocate(self, request_id: str, num_tokens: int, hit: PrefixHit = NO_HIT,
                     priority: int | None = None, reserve: int = 0) -> bool:
        """Whether `allocate` would succeed; `reserve`: free blocks promised to others (counted
        against the unretained ones only, where `priority` keeps the retained from it)."""
        return self._fits(request_id, num_tokens, hit, priority, reserve=reserve)

    def allocate(self, request_id: str, num_tokens: int, hit: PrefixHit = NO_HIT,
                 priority: int | None = None) -> list[int] | None:
        """Make the request hold blocks for its first num_tokens tokens.

        `hit` (admission only) is taken first. `priority` (admission under the priority policy):
        the request's level; free blocks retained for sessions of better priority are not taken
        (BlockPool.protects), though it may share those of them it hits. Returns the ids of the
        newly taken blocks, or None (and changes nothing) when too few blocks are free.
        """
        if not self._fits(request_id, num_tokens, hit, priority):
            return None
        blocks = self._blocks.setdefault(request_id, [])
        if hit.blocks:
            assert not blocks, "a prefix hit is only taken at admission"
            self.pool.touch(hit.blocks)
            blocks.extend(hit.blocks)
        want = -(-num_tokens // self.block_size) - len(blocks)
        new = self.pool.take(want) if want > 0 else []
        blocks.extend(new)
        return [b.block_id for b in new]

    def can_allocate_without(self, request_id: str, num_tokens: int, hit: PrefixHit,
                             others: Sequence[str], priority: int | None = None) -> bool:
        """Whether `allocate(request_id, num_tokens, hit, priority)` would succeed once the
        requests `others` were freed: the blocks only they hold join the free queue (and the
        hit's among them are taken out of it again)."""
        held = Counter(b.block_id for rid in others for b in self._blocks.get(rid, ()))
        freed = {i for i, n in held.items() if self.pool.blocks[i].ref_count == n}
        if priority is not None and self.pool.protects(priority):   # retained blocks are not its
            freed = {i for i in freed if not self.pool.blocks[i].retained}
        return self._fits(request_id, num_tokens, hit, priority, freed)

    def _fits(self, request_id: str, num_tokens: int, hit: PrefixHit, priority: int | None,
              freed: set[int] = frozenset(), reserve: int = 0) -> bool:
        """Whether the allocation finds its free blocks, `freed` (block ids) counted as free."""
        need = self._num_needed(request_id, num_tokens, hit) + sum(b.block_id in freed for b in hit.blocks)
        if priority is None or not self.pool.protects(priority):
            return need <= self.pool.num_free + len(freed)
        # only unretained free blocks are taken; a hit on a free retained block is shared, not taken
        shared = sum(1 for b in hit.blocks if b.ref_count == 0 and b.retained)
        return need - shared + reserve <= self.pool.num_unretained_free + len(freed)

    def _num_needed(self, request_id: str, num_tokens: int, hit: PrefixHit) -> int:
        """Free-queue blocks consumed by the allocation: new blocks plus free cache hits."""
        have = len(self._blocks.get(request_id, ())) or len(hit.blocks)
        new = max(0, -(-num_tokens // self.block_size) - have)
        return new + sum(1 for b in hit.blocks if b.ref_count == 0)

    def cache_computed(self, request_id: str, token_ids: Sequence[int], num_tokens: int,
                       extra_keys: Partition | tuple) -> None:
        """Publish the full blocks among the first num_tokens tokens as cached prefixes.

        Call only once their KV is (or, within the same step, will be) written: the model
        writes a layer's new K/V for the whole batch before any attention of that layer.
        """
        if not self.enable_caching:
            return
        num_full = num_tokens // self.block_size
        hashes = self.block_hashes(request_id, token_ids, extra_keys)[:num_full]
        self.pool.cache(self._blocks[request_id][:num_full], hashes)

    def cached_blocks(self, request_id: str, token_ids: Sequence[int], num_tokens: int,
                      extra_keys: tuple) -> list[KVBlock]:
        """The cached blocks holding the leading run of the request's first num_tokens tokens
        (what a finished turn leaves for the next one); no reference taken."""
        if not self.enable_caching:
            return []
        hashes = self.block_hashes(request_id, token_ids, extra_keys)[:num_tokens // self.block_size]
        return self.pool.cached_prefix(hashes)

    # --- release ------------------------------------------------------------------
    def free(self, request_id: str) -> None:
        blocks = self._blocks.pop(request_id, None)
        self._hashes.pop(request_id, None)
        if blocks:
            self.pool.release(blocks)

    def truncate(self, request_id: str, num_tokens: int) -> None:
        """Release the request's blocks past those its first num_tokens tokens need (blocks that
        only rejected proposals reached). They hold no cached prefix: only accepted tokens are."""
        blocks = self._blocks.get(request_id)
        keep = -(-num_tokens // self.block_size)
        if blocks and len(blocks) > keep:
            tail = blocks[keep:]
            del blocks[keep:]
            self.pool.release(tail)

    def block_ids(self, request_id: str) -> list[int]:
        return [b.block_id for b in self._blocks.get(request_id, ())]

    def num_held(self) -> int:
        return len(self._blocks)
