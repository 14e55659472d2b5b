"""Packing documents into training rows: "aligned" keeps every document whole in one row."""

from __future__ import annotations

import numpy as np
import pytest

from tandem_demo.packing import TokenizedDocs, aligned_rows, epoch_rows
from tandem_demo.train import TrainConfig

PAD = 0


def docs_of(lengths: list[int]) -> TokenizedDocs:
    """Document i holds the token i + 1, `lengths[i]` times (so every token names its document)."""
    tokens = np.concatenate([np.full(n, i + 1, dtype=np.int32) for i, n in enumerate(lengths)])
    return TokenizedDocs(tokens, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def test_aligned_rows_hold_whole_documents_and_mark_padding():
    rng = np.random.default_rng(1)
    lengths = [int(x) for x in rng.integers(20, 90, size=300)] + [250, 130]   # two longer than a row
    docs = docs_of(lengths)
    rows, pad = aligned_rows(docs, 100, seed=3, epoch=0, pad_id=PAD)
    assert rows.shape == pad.shape and rows.shape[1] == 100
    assert ((rows == PAD) == pad).all()                          # padding exactly where marked
    assert all(not p[:np.argmax(p)].any() for p in pad if p.any())   # padding only at a row's end
    # every document's tokens all there; one of at most a row's length lies in a single row
    for i, n in enumerate(lengths):
        where = np.nonzero((rows == i + 1).any(axis=1))[0]
        assert int((rows == i + 1).sum()) == n
        if n <= 100:
            assert len(where) == 1
            row = rows[where[0]]
            at = np.nonzero(row == i + 1)[0]
            assert (np.diff(at) == 1).all()                      # contiguous
    assert pad.sum() / pad.size < 0.15                          # best fit leaves little padding
    again, _ = aligned_rows(docs, 100, seed=3, epoch=0, pad_id=PAD)
    other, _ = aligned_rows(docs, 100, seed=3, epoch=1, pad_id=PAD)
    assert (again == rows).all() and other.shape[0] > 0 and not np.array_equal(other, rows)


def test_stream_rows_split_documents_where_aligned_rows_do_not():
    docs = docs_of([60] * 50)
    stream = epoch_rows(docs, 100, seed=0, epoch=0)
    split = sum(len(np.nonzero((stream == i + 1).any(axis=1))[0]) > 1 for i in range(50))
    aligned, _ = aligned_rows(docs, 100, seed=0, epoch=0, pad_id=PAD)
    assert split > 10
    assert all(len(np.nonzero((aligned == i + 1).any(axis=1))[0]) == 1 for i in range(50))


def test_an_unknown_packing_is_refused():
    with pytest.raises(ValueError, match="packing 'greedy'"):
        TrainConfig(out_dir="/tmp/x", packing="greedy")
    assert TrainConfig(out_dir="/tmp/x", packing="aligned").packing == "aligned"
