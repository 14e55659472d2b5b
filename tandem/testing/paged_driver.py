"""A minimal step driver for tests: feeds token pieces of several sequences through a model's
paged-attention forward, managing block tables by hand (no scheduler, no sampling).

Blocks are handed out in a shuffled order so that block tables are never contiguous, and the
cache starts filled with random values so that reading an unwritten slot shows up in logits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from tandem.layers.attention_batch import AttentionBatch, SeqSlice


@dataclass
class _Seq:
    block_ids: list[int] = field(default_factory=list)
    num_computed: int = 0


class PagedDriver:
    def __init__(self, model, num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 block_size: int = 4, num_blocks: int = 64, seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        self.model = model
        self.block_size = block_size
        self.device = torch.device(device)
        gen = torch.Generator().manual_seed(seed)
        self.kv_cache = torch.randn((num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim),
                                    generator=gen).to(dtype=dtype, device=self.device)
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)
        self.seqs: dict[str, _Seq] = {}

    def step(self, pieces: list[tuple[str, list[int]]]) -> torch.Tensor:
        """pieces: (sequence id, its next new tokens) in batch order -> logits [T, vocab] float32."""
        slices, ids, positions = [], [], []
        for seq_id, tokens in pieces:
            s = self.seqs.setdefault(seq_id, _Seq())
            end = s.num_computed + len(tokens)
            while len(s.block_ids) * self.block_size < end:
                s.block_ids.append(self.free.pop())
            slices.append(SeqSlice(list(s.block_ids), s.num_computed, len(tokens)))
            ids.extend(tokens)
            positions.extend(range(s.num_computed, end))
        batch = AttentionBatch.build(slices, self.block_size, self.device)
        hidden = self.model(torch.tensor(ids, device=self.device), torch.tensor(positions, device=self.device),
                            batch, self.kv_cache)
        for seq_id, tokens in pieces:
            self.seqs[seq_id].num_computed += len(tokens)
        return self.model.compute_logits(hidden)
