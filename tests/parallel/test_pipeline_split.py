"""Micro-batches of a pipeline step: consecutive sequences, every sequence in exactly one group,
groups balanced by tokens."""

from __future__ import annotations

from tandem.layers.attention_batch import SeqSlice
from tandem.parallel.pipeline import split_micro_batches


def _s(n: int) -> SeqSlice:
    return SeqSlice([0] * 8, 0, n)


def test_groups_cover_every_sequence_once_in_order():
    for sizes in ([1], [5, 5], [1, 1, 1, 1], [30, 1, 1, 1], [1, 1, 1, 30], [3, 7, 2, 9, 4]):
        for count in (1, 2, 3):
            groups = split_micro_batches([_s(n) for n in sizes], count)
            assert groups[0][0] == 0 and groups[-1][1] == len(sizes)
            assert all(a < b for a, b in groups) and all(groups[i][1] == groups[i + 1][0] for i in range(len(groups) - 1))
            assert len(groups) <= min(count, len(sizes))


def test_groups_balance_tokens():
    assert split_micro_batches([_s(n) for n in (4, 4, 4, 4)], 2) == [(0, 2), (2, 4)]
    assert split_micro_batches([_s(n) for n in (1, 1, 1, 1)], 1) == [(0, 4)]
    assert split_micro_batches([_s(n) for n in (10, 1, 1)], 2) == [(0, 1), (1, 3)]
