"""The EAGLE-3 head's paged KV bookkeeping: per request, its blocks in the head's own cache tensor,
and a prefix cache of full blocks so that a prompt the target reads from its own prefix cache
(and so computes no hidden states for) still finds the head's rows for it (mechanism only;
tandem/spec/eagle3.py decides).

Slot j of a request holds the head's row at position origin + j. A row's keys and values depend
on its own input only (the target's states at its position and the token after it), and the
target's states on every token before: so with a block-aligned origin, a full block of rows
computed from the target's states (absolute block b: positions [b*bs, (b+1)*bs)) depends only on
the tokens up to one past its end (row p reads token p + 1), whatever the window it was computed
in. It is published under a chained hash of those tokens whose first block carries the request's
KV partition, its cache salt and tenant, as the target's blocks do (tandem/kv/block_hash.py:
one tenant never adopts rows another tenant's prompt computed), and stays in the pool's free queue
after its request leaves until a new block is taken over it (tandem.kv.BlockPool's caching). A
later request adopts a run of such blocks that ends where its own target states begin, wherever
the run starts (its window then starts there). A hit adds a reference; such blocks are never
written again except with the same rows.
Hashes are tandem/kv/block_hash.py's (blake2b, 64 bits, seeded with this cache's own seed, so
they never equal a target block's hash); a collision would only cost drafts, since the target
verifies every draft.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.kv.block_hash import Partition, as_partition, hash_block_tokens
from tandem.kv.block_pool import KVBlock
from tandem.spec.proposer_kv import ProposerKV

_SEED = 0x3A61E


@dataclass(eq=False)
class HeadSeq:
    blocks: list[KVBlock] = field(default_factory=list)
    origin: int = 0     # position of slot 0
    rows: int = 0       # slots [0, rows) hold rows computed from the target's states
    published: int = 0  # leading blocks already in the prefix cache
    cache_keys: Partition = Partition()   # the request's KV partition (tandem/kv/block_hash.py)

    @property
    def block_ids(self) -> list[int]:
        return [b.block_id for b in self.blocks]

    def add_blocks(self, taken: list[KVBlock]) -> None:
        self.blocks += taken


def block_hashes(tokens: list[int], num_blocks: int, block_size: int,
                 cache_keys: Partition | tuple = ()) -> list[int]:
    """Chained hashes of the first `num_blocks` blocks' rows (block b: tokens up to (b+1)*bs,
    one past its end); `cache_keys`: the request's partition. A block is shared past the tenant
    only when all its bs + 1 tokens lie inside a declared shared prefix (span bs + 1)."""
    part = as_partition(cache_keys)
    out: list[int] = []
    h = None
    for b in range(num_blocks):
        h = hash_block_tokens(h, tokens[b * block_size:(b + 1) * block_size + 1],
                              part.keys_at(b, block_size, block_size + 1), _SEED)
        out.append(h)
    return out


class HeadKV(ProposerKV[HeadSeq]):
    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size, lambda request: HeadSeq(cache_keys=request.cache_keys))

    def reuse(self, seq: HeadSeq, tokens: list[int], lo: int, hi: int) -> int:
        """For a request with no rows yet: take cached blocks holding its rows for positions
        [b * bs, hi // bs * bs), the longest such run that starts at or after lo's block; the run
        must reach hi's block boundary. -> the rows they hold (0: none, nothing taken)."""
        if seq.blocks or seq.rows:
            return 0
        bs = self.block_size
        end = min(hi, len(tokens) - 1) // bs
        hashes = block_hashes(tokens, end, bs, seq.cache_keys)
        for b in range(max(0, lo) // bs, end):
            hits = self.pool.cached_prefix(hashes[b:])
            if len(hits) == end - b:
                self.pool.touch(hits)
                seq.blocks, seq.origin, seq.rows, seq.published = hits, b * bs, len(hits) * bs, len(hits)
                return seq.rows
        return 0

    def publish(self, seq: HeadSeq, tokens: list[int]) -> None:
        """Cache the request's full blocks of rows from the target's states (a block-aligned origin)."""
        if seq.origin % self.block_size:
            return
        base, full = seq.origin // self.block_size, seq.rows // self.block_size
        if full > seq.published:
            hashes = block_hashes(tokens, base + full, self.block_size, seq.cache_keys)[base:]
            self.pool.cache(seq.blocks[seq.published:full], hashes[seq.published:full])
            seq.published = full

    def restart(self, seq: HeadSeq, origin: int) -> None:
        """Start the request's rows over at position `origin` (its blocks go back: cached ones
        may be shared, and their slots would now mean other positions)."""
        if seq.blocks:
            self.pool.release(seq.blocks)
        seq.blocks, seq.origin, seq.rows, seq.published = [], origin, 0, 0
