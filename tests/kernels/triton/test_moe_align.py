"""The grouped GEMMs' layout: pairs sorted by expert in runs padded to whole tiles, exact rows."""

from __future__ import annotations

import torch

from tandem.kernels.triton.moe_align import align, max_rows


def test_pairs_sorted_by_expert_in_padded_tiles():
    # 3 tokens x top-2 over 4 experts; pair p = token p // 2, slot p % 2
    ids = torch.tensor([[2, 0], [2, 3], [0, 2]])
    layout = align(ids, num_experts=4, block_m=2)
    P = 6
    assert layout.num_pairs == P and layout.pair_ids.shape[0] == max_rows(P, 4, 2) == 10
    # expert 0: pairs 1, 4; expert 2: pairs 0, 2, 5 (+ padding); expert 3: pair 3 (+ padding)
    assert layout.pair_ids.tolist() == [1, 4, 0, 2, 5, P, 3, P, P, P]
    assert layout.tile_expert.tolist() == [0, 2, 2, 3, -1]


def test_choices_of_other_ranks_are_left_out():
    ids = torch.tensor([[1, -1], [-1, 0]])   # -1: an expert another rank computes
    layout = align(ids, num_experts=2, block_m=2)
    assert layout.pair_ids.tolist() == [3, 4, 0, 4, 4, 4]
    assert layout.tile_expert.tolist() == [0, 1, -1]
