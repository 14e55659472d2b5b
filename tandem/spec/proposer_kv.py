"""Per-request blocks of a proposer's private paged KV (a draft model's, an EAGLE-3 head's):
one BlockPool with prefix caching, one record per request (by identity), blocks reserved as the
request grows and returned when it leaves (mechanism only; the proposer decides what its blocks
hold: tandem/spec/draft_cache.py, eagle3_kv.py). The target's prefix cache, preemption and KV
handoff never see these blocks; a proposer recomputes what it lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from tandem.kv.block_pool import BlockPool, KVBlock


class HoldsBlocks(Protocol):
    blocks: list[KVBlock]

    def add_blocks(self, taken: list[KVBlock]) -> None: ...


S = TypeVar("S", bound=HoldsBlocks)


class ProposerKV(Generic[S]):
    def __init__(self, num_blocks: int, block_size: int, new_seq: Callable[[object], S]) -> None:
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, enable_caching=True)
        self.seqs: dict[object, S] = {}   # request (by identity) -> its record
        self._new_seq = new_seq

    def seq(self, request) -> S:
        seq = self.seqs.get(request)
        if seq is None:
            seq = self.seqs[request] = self._new_seq(request)
        return seq

    def reserve(self, seq: S, num_slots: int) -> bool:
        """Hold blocks for slots [0, num_slots); False (nothing taken) when too few are free."""
        needed = -(-num_slots // self.block_size) - len(seq.blocks)
        if needed <= 0:
            return True
        if needed > self.pool.num_free:
            return False
        seq.add_blocks(self.pool.take(needed))
        return True

    def free(self, request) -> None:
        seq = self.seqs.pop(request, None)
        if seq is not None and seq.blocks:
            self.pool.release(seq.blocks)

    @property
    def num_held(self) -> int:
        """Blocks referenced by live requests (cached free ones are not held)."""
        return self.pool.num_blocks - self.pool.num_free
