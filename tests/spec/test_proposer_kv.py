"""ProposerKV: per-request blocks of a proposer's private KV (reserve, free, what is held)."""

from dataclasses import dataclass, field

from tandem.kv.block_pool import KVBlock
from tandem.spec.proposer_kv import ProposerKV


@dataclass(eq=False)
class _Seq:
    blocks: list[KVBlock] = field(default_factory=list)

    def add_blocks(self, taken: list[KVBlock]) -> None:
        self.blocks += taken


class _Req:
    pass


def test_reserve_covers_the_slots_and_refuses_without_taking_anything():
    kv = ProposerKV(num_blocks=5, block_size=4, new_seq=lambda r: _Seq())
    a, b = _Req(), _Req()
    sa = kv.seq(a)
    assert kv.seq(a) is sa and kv.seq(b) is not sa          # one record per request, by identity
    assert kv.reserve(sa, 9) and len(sa.blocks) == 3         # ceil(9 / 4)
    assert kv.reserve(sa, 12) and len(sa.blocks) == 3        # already covered
    sb = kv.seq(b)
    assert not kv.reserve(sb, 12) and sb.blocks == []        # 3 needed, 2 free: none taken
    assert kv.num_held == 3
    assert kv.reserve(sb, 8) and kv.num_held == 5 and kv.pool.num_free == 0


def test_free_returns_the_blocks_and_cached_free_blocks_are_not_held():
    kv = ProposerKV(num_blocks=4, block_size=2, new_seq=lambda r: _Seq())
    req = _Req()
    seq = kv.seq(req)
    assert kv.reserve(seq, 4)
    kv.pool.cache(seq.blocks[:1], [123])
    kv.free(req)
    assert kv.num_held == 0 and not kv.seqs and kv.pool.num_free == 4
    assert kv.pool.lookup(123) is not None                   # still cached until its block is taken
    kv.free(req)                                             # a second free is a no-op
    assert kv.num_held == 0
