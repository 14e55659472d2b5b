"""A worker's KV cache split over ranks, as the process that moves its blocks sees it.

The wire format of a KV block is always the whole model's block (KVLayout: every layer, every KV
head, `[num_layers, parts, block_size, num_kv_heads, head_dim]`), whatever the parallel layouts
of the two workers. A parallel worker holds each block in pieces: rank r holds the rectangle
`KVShard(layers, heads)` of it (its pipeline stage's layers, its tensor-parallel share of the KV
heads) in its own tensor `[num_blocks, layer1 - layer0, parts, block_size, head1 - head0, head_dim]`,
under the same block ids on every rank (rank 0's scheduler allocates them for all). Ranks of one
worker share a host, so rank 0 maps every rank's cache (tandem.parallel) and `ShardedKV` is the
list of those pieces: a source assembles the whole block from them as it sends, a sink writes each
piece straight into the rank that holds it, a few blocks at a time; no rank ever holds another
rank's KV and nothing gathers a whole cache.

Invariants: the distinct shards tile the whole block (no gap, no overlap); shards that repeat are
replicas (MLA's latent, the same on every tensor-parallel rank): reads take the first, writes go to
every replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer.blocks import check_kv, paired_runs


@dataclass(frozen=True)
class KVShard:
    """Layers [layers[0], layers[1]) and KV heads [heads[0], heads[1]) of the whole block."""

    layers: tuple[int, int]
    heads: tuple[int, int]

    @classmethod
    def whole(cls, layout: KVLayout) -> "KVShard":
        return cls((0, layout.num_layers), (0, layout.num_kv_heads))

    @property
    def area(self) -> int:
        return (self.layers[1] - self.layers[0]) * (self.heads[1] - self.heads[0])

    def intersect(self, other: "KVShard") -> "KVShard | None":
        layers = (max(self.layers[0], other.layers[0]), min(self.layers[1], other.layers[1]))
        heads = (max(self.heads[0], other.heads[0]), min(self.heads[1], other.heads[1]))
        if layers[0] >= layers[1] or heads[0] >= heads[1]:
            return None
        return KVShard(layers, heads)

    def local(self, part: "KVShard") -> tuple[slice, slice]:
        """(layer slice, head slice) of `part` (inside self) in self's own tensor."""
        return (slice(part.layers[0] - self.layers[0], part.layers[1] - self.layers[0]),
                slice(part.heads[0] - self.heads[0], part.heads[1] - self.heads[0]))

    def layout(self, whole: KVLayout) -> KVLayout:
        """The layout of the tensor holding this shard of `whole`'s blocks."""
        return KVLayout(model=whole.model, dtype=whole.dtype, block_size=whole.block_size,
                        num_layers=self.layers[1] - self.layers[0],
                        num_kv_heads=self.heads[1] - self.heads[0], head_dim=whole.head_dim, kind=whole.kind)

    def to_list(self) -> list[int]:
        return [*self.layers, *self.heads]

    @classmethod
    def from_list(cls, v: Sequence[int]) -> "KVShard":
        l0, l1, h0, h1 = (int(x) for x in v)
        return cls((l0, l1), (h0, h1))


@dataclass(frozen=True)
class ShardedKV:
    layout: KVLayout                                   # the whole model's block
    parts: tuple[tuple[KVShard, torch.Tensor], ...]    # (shard, tensor [num_blocks, *shard.layout(..).block_shape])

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a KV cache needs at least one part")
        counts = {check_kv(t, s.layout(self.layout)) for s, t in self.parts}
        if len(counts) != 1:
            raise ValueError(f"the ranks' KV caches have different block counts: {sorted(counts)}")
        distinct = self.sources
        whole = KVShard.whole(self.layout)
        if any(s.intersect(whole) != s for s, _ in distinct):
            raise ValueError(f"a KV shard lies outside the model's {whole}")
        for i, (a, _) in enumerate(distinct):
            for b, _ in distinct[i + 1:]:
                if a.intersect(b) is not None:
                    raise ValueError(f"KV shards {a} and {b} overlap")
        if sum(s.area for s, _ in distinct) != whole.area:
            raise ValueError("the KV shards do not cover every layer and KV head")

    @classmethod
    def single(cls, kv: torch.Tensor, layout: KVLayout) -> "ShardedKV":
        """One process holding the whole block (every worker without ranks)."""
        return cls(layout, ((KVShard.whole(layout), kv),))

    @property
    def num_blocks(self) -> int:
        return self.parts[0][1].shape[0]

    @property
    def tensor(self) -> torch.Tensor | None:
        """The one tensor holding whole blocks, if this cache is one part; else None."""
        return self.parts[0][1] if len(self.parts) == 1 else None

    @property
    def sources(self) -> tuple[tuple[KVShard, torch.Tensor], ...]:
        """One part per distinct shard (the first replica): what reads take."""
        seen: dict[KVShard, torch.Tensor] = {}
        for s, t in self.parts:
            seen.setdefault(s, t)
        return tuple(seen.items())


def copy_blocks(src: ShardedKV, src_ids: Sequence[int], dst: ShardedKV, dst_ids: Sequence[int]) -> None:
    """dst blocks dst_ids[i] := src blocks src_ids[i], piece by piece: every destination part
    (replicas included) gets the intersection of its shard with each distinct source shard.
    One tensor copy per (piece, run of blocks consecutive on both sides)."""
    if src.layout.block_shape != dst.layout.block_shape or src.layout.dtype != dst.layout.dtype:
        raise ValueError(f"cannot copy blocks of {src.layout} into {dst.layout}")
    runs = paired_runs(list(src_ids), list(dst_ids))
    for d_shard, d_t in dst.parts:
        for s_shard, s_t in src.sources:
            piece = d_shard.intersect(s_shard)
            if piece is None:
                continue
            dl, dh = d_shard.local(piece)
            sl, sh = s_shard.local(piece)
            for s, d, c in runs:
                # [c, layers, parts, block_size, heads, head_dim] piece of each block
                d_t[d:d + c, dl, :, :, dh].copy_(s_t[s:s + c, sl, :, :, sh])


def staging(layout: KVLayout, max_bytes: int) -> torch.Tensor:
    """A host buffer [n, *layout.block_shape] of whole blocks, n >= 1 and n * block_nbytes <= max_bytes
    where possible: what a source assembles into, or a sink receives into, a few blocks at a time."""
    n = max(1, max_bytes // layout.block_nbytes)
    return torch.empty((n, *layout.block_shape), dtype=layout.torch_dtype)
