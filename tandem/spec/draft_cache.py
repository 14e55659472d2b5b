"""The draft model's own paged KV bookkeeping: per request, its blocks in the draft's cache tensor
and which tokens their K/V holds (mechanism only; tandem/spec/draft_model.py decides).

The draft's KV is private to the proposer: the target's prefix cache, preemption and handoff
never see it, and the draft recomputes what it misses. A request's draft KV holds positions
[0, computed): the request's own tokens up to `base` (its length at the last call), then the
draft tokens the draft fed itself after it (`fed`). At the next call the request has grown by
the tokens the target accepted plus its own next token; the draft's K/V stays valid up to where
those agree with `fed` (`valid`), and the rest is recomputed (a rejected draft's K/V is simply
overwritten). Blocks come from tandem/spec/proposer_kv.py's pool, sized by the caller; they
return to it when the request leaves (`free`).

Prefix caching (the draft's own, by the chained block hashes of the request's tokens and KV
partition, its cache salt and tenant, as the target's: tandem/kv/block_hash.py): a new request
takes the cached blocks of its leading full blocks (`adopt`), so a system prompt and tool list
that every turn resends is computed by the draft once, not once per request; full blocks of a
request's own tokens are cached once the draft holds them (`publish`). A cached block is never written again: a request only rewrites positions from its
`valid` on, which is never below what it adopted or published.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.kv.block_hash import Partition, hash_request_blocks
from tandem.kv.block_pool import KVBlock
from tandem.spec.proposer_kv import ProposerKV


@dataclass(eq=False)
class DraftSeq:
    blocks: list[KVBlock] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)
    computed: int = 0                                    # positions whose K/V the draft holds
    hashes: list[int] = field(default_factory=list)      # chained hashes of its own full blocks
    num_published: int = 0                               # leading blocks cached (adopted or published)
    base: int = 0                                        # the request's length at the last call
    fed: list[int] = field(default_factory=list)         # draft tokens at positions [base, computed)

    def add_blocks(self, taken: list[KVBlock]) -> None:
        self.blocks += taken
        self.block_ids += [b.block_id for b in taken]

    def valid(self, tokens: list[int]) -> int:
        """Positions of `tokens` (the request's tokens now) whose K/V the draft holds."""
        own = min(self.computed, self.base)
        if own < self.base:
            return own
        n = 0
        for fed, token in zip(self.fed, tokens[self.base:]):
            if fed != token:
                break
            n += 1
        return self.base + n


class DraftCache(ProposerKV[DraftSeq]):
    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size, lambda request: DraftSeq())

    def _hashes(self, seq: DraftSeq, tokens: list[int], extra_keys: Partition | tuple) -> list[int]:
        n = len(tokens) // self.block_size
        if len(seq.hashes) < n:
            seq.hashes += hash_request_blocks(tokens, self.block_size, extra_keys, start=len(seq.hashes),
                                              parent=seq.hashes[-1] if seq.hashes else None)
        return seq.hashes

    def adopt(self, seq: DraftSeq, tokens: list[int], extra_keys: Partition | tuple) -> None:
        """A request the draft has not seen: take the cached blocks of its leading full blocks,
        short of its last token (whose row must go through the draft to give a first draft)."""
        if seq.blocks:
            return
        leading = self._hashes(seq, tokens, extra_keys)[:(len(tokens) - 1) // self.block_size]
        hit = self.pool.cached_prefix(leading)
        if hit:
            self.pool.touch(hit)
            seq.add_blocks(hit)
            seq.computed = seq.base = len(hit) * self.block_size
            seq.num_published = len(hit)

    def publish(self, seq: DraftSeq, tokens: list[int], extra_keys: Partition | tuple) -> None:
        """Cache the full blocks of the request's own tokens whose K/V the draft now holds."""
        full = min(seq.computed, seq.base, len(tokens)) // self.block_size
        if full > seq.num_published:
            hashes = self._hashes(seq, tokens, extra_keys)
            self.pool.cache(seq.blocks[seq.num_published:full], hashes[seq.num_published:full])
            seq.num_published = full
