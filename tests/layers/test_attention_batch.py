"""AttentionBatch.build: exact slots, groups, block tables and masks for small examples."""

from __future__ import annotations

import pytest
import torch

from tandem.layers.attention_batch import AttentionBatch, SeqSlice

A = SeqSlice(block_ids=[7, 2, 9], num_computed=5, num_new=3)   # prefill chunk over cached context
B = SeqSlice(block_ids=[4], num_computed=0, num_new=1)         # one-token prompt: decode group
C = SeqSlice(block_ids=[3, 5], num_computed=4, num_new=1)      # decode crossing into a new block
D = SeqSlice(block_ids=[1, 6], num_computed=0, num_new=6)      # fresh prefill


def test_mixed_step_exact():
    b = AttentionBatch.build([A, B, C, D], block_size=4, device="cpu")
    assert b.num_tokens == 11 and b.block_size == 4
    assert b.slot_block_ids.tolist() == [2, 2, 2, 4, 5, 1, 1, 1, 1, 6, 6]
    assert b.slot_offsets.tolist() == [1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 1]

    (g,) = b.decodes
    assert g.token_range == (3, 5) and g.token_index.tolist() == [3, 4]
    assert g.block_table.tolist() == [[4, 0], [3, 5]]
    assert g.max_ctx == 5
    assert g.key_mask.shape == (2, 1, 1, 5)
    assert g.key_mask[:, 0, 0].tolist() == [[True, False, False, False, False], [True] * 5]

    pa, pd = b.prefills
    assert (pa.token_start, pa.token_end, pa.num_computed) == (0, 3, 5)
    assert pa.block_ids.tolist() == [7, 2]   # positions [0, 8) need two blocks, not three
    assert pa.mask.tolist() == [
        [True] * 6 + [False, False],
        [True] * 7 + [False],
        [True] * 8,
    ]
    assert (pd.token_start, pd.token_end, pd.num_computed) == (5, 11, 0)
    assert pd.block_ids.tolist() == [1, 6] and pd.mask is None


def test_non_contiguous_decode_rows():
    b = AttentionBatch.build([B, A, C], block_size=4, device="cpu")
    assert b.decodes[0].token_range is None
    assert b.decodes[0].token_index.tolist() == [0, 4]
    assert [p.token_start for p in b.prefills] == [1]


def test_pure_decode_has_no_prefills():
    b = AttentionBatch.build([C, B], block_size=4, device="cpu")
    assert b.prefills == () and b.decodes[0].token_range == (0, 2)
    assert b.decodes[0].block_table.tolist() == [[3, 5], [4, 0]]


def test_decodes_bucketed_by_context_length():
    # block counts 3 and 5 share the small bucket; 9 and 20 blocks get their own
    seqs = [SeqSlice(list(range(100, 109)), 35, 1),   # 36 tokens -> 9 blocks
            SeqSlice([1, 2, 3], 10, 1),                # 11 tokens -> 3 blocks
            SeqSlice(list(range(200, 220)), 77, 1),   # 78 tokens -> 20 blocks
            SeqSlice([4, 5, 6, 7, 8], 16, 1)]          # 17 tokens -> 5 blocks
    b = AttentionBatch.build(seqs, block_size=4)
    assert [g.token_index.tolist() for g in b.decodes] == [[1, 3], [0], [2]]
    assert [g.max_ctx for g in b.decodes] == [17, 36, 78]
    assert [g.token_range for g in b.decodes] == [None, (0, 1), (2, 3)]
    assert b.decodes[0].block_table.tolist() == [[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]]
    assert b.decodes[0].key_mask[:, 0, 0].sum(-1).tolist() == [11, 17]


def test_too_few_blocks_rejected():
    with pytest.raises(ValueError, match="needs 3 blocks"):
        AttentionBatch.build([SeqSlice([1, 2], num_computed=7, num_new=2)], block_size=4)


def test_zero_new_tokens_rejected():
    with pytest.raises(ValueError, match="num_new=0"):
        AttentionBatch.build([SeqSlice([1], num_computed=1, num_new=0)], block_size=4)


def test_tensors_are_long_on_device():
    b = AttentionBatch.build([A, B], block_size=4, device=torch.device("cpu"))
    for t in (b.slot_block_ids, b.slot_offsets, b.decodes[0].block_table, b.prefills[0].block_ids):
        assert t.dtype == torch.long and t.device.type == "cpu"
    assert b.decodes[0].key_mask.dtype == torch.bool
