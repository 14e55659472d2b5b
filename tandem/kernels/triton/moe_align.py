"""The layout grouped expert GEMMs read: each token's top-k choices ("pairs", pair p = token
p // k, slot p % k) sorted by expert, each expert's run padded to a multiple of BLOCK_M rows, so
that every BLOCK_M-row tile of the layout belongs to one expert.

Torch ops on the device only, no host synchronisation, and sizes that depend on the step's
token count alone (never on the routing): the layout can be built inside a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MoELayout:
    pair_ids: torch.Tensor     # LongTensor[max_rows]: the pair in each row; num_pairs for padding
    tile_expert: torch.Tensor  # LongTensor[max_rows // BLOCK_M]: each tile's (local) expert; -1 none
    num_pairs: int             # T * k
    block_m: int


def max_rows(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Rows of the padded layout in the worst case: every expert's run padded by block_m - 1."""
    return -(-(num_pairs + num_experts * (block_m - 1)) // block_m) * block_m


def align(expert_ids: torch.Tensor, num_experts: int, block_m: int) -> MoELayout:
    """expert_ids LongTensor[T, k] (local expert ids; -1: a choice this rank does not compute)."""
    flat = expert_ids.flatten()                                                  # [P]
    P = flat.numel()
    rows = max_rows(P, num_experts, block_m)
    key = torch.where(flat < 0, num_experts, flat)                               # skipped pairs last
    order = torch.sort(key, stable=True).indices                                 # [P] pairs by expert
    # scatter_add, not bincount: CUDA's bincount reads the largest id back to size its output
    counts = torch.zeros(num_experts + 1, dtype=torch.long, device=flat.device)
    counts = counts.scatter_add_(0, key, torch.ones_like(key))[:num_experts]     # [E]
    padded = (counts + block_m - 1) // block_m * block_m                         # [E]
    run_start = torch.cumsum(padded, 0) - padded                                 # [E] row of each run
    first = torch.cumsum(counts, 0) - counts                                     # [E] in sorted order
    sorted_key = key[order]                                                      # [P]
    valid = sorted_key < num_experts
    e = sorted_key.clamp(max=num_experts - 1)
    dest = run_start[e] + torch.arange(P, device=flat.device) - first[e]         # [P]
    dest = torch.where(valid, dest, rows)                                        # skipped: dropped below
    pair_ids = torch.full((rows + 1,), P, dtype=torch.long, device=flat.device)
    pair_ids.scatter_(0, dest, order)
    tile_start = torch.arange(0, rows, block_m, device=flat.device)              # [rows / block_m]
    tile_expert = torch.searchsorted(torch.cumsum(padded, 0), tile_start, right=True)
    tile_expert = torch.where(tile_expert < num_experts, tile_expert, -1)
    return MoELayout(pair_ids=pair_ids[:rows], tile_expert=tile_expert, num_pairs=P, block_m=block_m)
