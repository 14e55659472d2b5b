"""AttentionBatch: everything paged attention needs for one step, built once on the CPU.

A step's flat input holds the new tokens of each sequence, in order. Sequence i has
`num_computed` tokens already in its KV blocks and `num_new` tokens in this step; its new
tokens sit at positions [num_computed, num_computed + num_new) and attend causally over
[0, num_computed + num_new).

Two kinds of groups, each one SDPA call per layer:
- decode groups: sequences with exactly one new token, padded to the group's longest context
  and batched with a key-padding mask. Sequences are bucketed by context length (block counts
  within a factor of 2, all contexts up to 8 blocks together) so padding never more than
  doubles the keys read, even when one long agent context shares a step with short ones;
- prefill chunks: one per sequence with more than one new token.
All indices and masks are tensors on the target device, shared by every layer; a prefill
chunk's mask is built on first use (kernels that read the positions need none).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class SeqSlice:
    block_ids: list[int]   # the sequence's KV blocks, in position order
    num_computed: int      # tokens already in the cache (context read from blocks)
    num_new: int           # tokens of this step (>= 1)


@dataclass(frozen=True)
class DecodeGroup:
    """Sequences with one new token each, attended in one padded call."""
    token_range: tuple[int, int] | None  # (start, end) when the rows are contiguous in the flat input
    token_index: torch.Tensor            # LongTensor[B]: rows of the flat input
    block_table: torch.Tensor            # LongTensor[B, max_blocks]; padding entries point at block 0
    context_lens: torch.Tensor           # LongTensor[B]: keys each row attends (its new token included)
    max_ctx: int                         # longest context in the group (keys per row before masking)

    @functools.cached_property
    def key_mask(self) -> torch.Tensor:
        """BoolTensor[B, 1, 1, max_ctx]; True = attend. Built on first use: only the SDPA path
        reads it (the native kernel takes context_lens), and over long contexts it is large."""
        keys = torch.arange(self.max_ctx, device=self.context_lens.device)
        return (keys.unsqueeze(0) < self.context_lens.unsqueeze(1)).view(-1, 1, 1, self.max_ctx)


@dataclass(frozen=True)
class PrefillChunk:
    """One sequence with several new tokens: rows [token_start, token_end) of the flat input."""
    token_start: int
    token_end: int
    num_computed: int
    block_ids: torch.Tensor              # LongTensor[nb]: blocks covering [0, num_computed + num_new)

    @functools.cached_property
    def mask(self) -> torch.Tensor | None:
        """BoolTensor[num_new, num_computed + num_new] on block_ids' device, built once per step;
        None = no cached context: attend over this step's K/V with a causal mask."""
        if self.num_computed == 0:
            return None
        n = self.token_end - self.token_start
        # query i sits at position num_computed + i and sees keys j <= num_computed + i
        mask = torch.ones((n, self.num_computed + n), dtype=torch.bool).tril(self.num_computed)
        return mask.to(self.block_ids.device)


@dataclass(frozen=True)
class AttentionBatch:
    num_tokens: int
    block_size: int
    slot_block_ids: torch.Tensor         # LongTensor[T]: block receiving each new token's K/V
    slot_offsets: torch.Tensor           # LongTensor[T]: offset inside that block
    decodes: tuple[DecodeGroup, ...]      # ordered by context bucket, shortest first
    prefills: tuple[PrefillChunk, ...]

    @classmethod
    def build(cls, seqs: Sequence[SeqSlice], block_size: int,
              device: torch.device | str = "cpu") -> "AttentionBatch":
        device = torch.device(device)
        slot_blocks: list[int] = []
        slot_offsets: list[int] = []
        buckets: dict[int, tuple[list[SeqSlice], list[int]]] = {}
        prefills: list[PrefillChunk] = []
        start = 0
        for s in seqs:
            end_pos = s.num_computed + s.num_new
            if s.num_new < 1 or s.num_computed < 0:
                raise ValueError(f"bad SeqSlice: num_computed={s.num_computed}, num_new={s.num_new}")
            nb = -(-end_pos // block_size)
            if len(s.block_ids) < nb:
                raise ValueError(f"SeqSlice needs {nb} blocks for {end_pos} tokens at block size "
                                 f"{block_size}, got {len(s.block_ids)}")
            if s.num_new == 1:
                slot_blocks.append(s.block_ids[s.num_computed // block_size])
                slot_offsets.append(s.num_computed % block_size)
            else:
                positions = range(s.num_computed, end_pos)
                slot_blocks.extend([s.block_ids[p // block_size] for p in positions])
                slot_offsets.extend([p % block_size for p in positions])
            if s.num_new == 1:
                seqs_rows = buckets.setdefault(_bucket(nb), ([], []))
                seqs_rows[0].append(s)
                seqs_rows[1].append(start)
            else:
                prefills.append(_prefill_chunk(s, start, nb, device))
            start += s.num_new
        return cls(
            num_tokens=start,
            block_size=block_size,
            slot_block_ids=torch.tensor(slot_blocks, dtype=torch.long).to(device),
            slot_offsets=torch.tensor(slot_offsets, dtype=torch.long).to(device),
            decodes=tuple(_decode_group(*buckets[key], block_size, device) for key in sorted(buckets)),
            prefills=tuple(prefills),
        )


def _bucket(num_blocks: int) -> int:
    """Context bucket of a decode: 0 for up to 8 blocks, then one bucket per doubling."""
    return max(0, (num_blocks - 1).bit_length() - 3)


def _prefill_chunk(s: SeqSlice, start: int, nb: int, device: torch.device) -> PrefillChunk:
    return PrefillChunk(
        token_start=start,
        token_end=start + s.num_new,
        num_computed=s.num_computed,
        block_ids=torch.tensor(s.block_ids[:nb], dtype=torch.long).to(device),
    )


def _decode_group(seqs: list[SeqSlice], rows: list[int], block_size: int,
                  device: torch.device) -> DecodeGroup:
    ctx = [s.num_computed + 1 for s in seqs]
    max_ctx = max(ctx)
    max_nb = -(-max_ctx // block_size)
    padded = []
    for s, c in zip(seqs, ctx):
        nb = -(-c // block_size)
        padded.append(s.block_ids[:nb] + [0] * (max_nb - nb))
    table = torch.tensor(padded, dtype=torch.long)                                  # [B, max_nb]
    contiguous = rows == list(range(rows[0], rows[0] + len(rows)))
    return DecodeGroup(
        token_range=(rows[0], rows[0] + len(rows)) if contiguous else None,
        token_index=torch.tensor(rows, dtype=torch.long).to(device),
        block_table=table.to(device),
        context_lens=torch.tensor(ctx, dtype=torch.long).to(device),
        max_ctx=max_ctx,
    )
