"""TokenIndex: positions per token, the same whether tokens arrive at once or one by one, across
rebuilds; separators are stored but never indexed."""

import numpy as np

from tandem.spec.token_index import SEPARATOR, TokenIndex


def test_positions_ascending_across_bulk_and_tail():
    index = TokenIndex([5, 7, 5, 9])
    index.extend([5, SEPARATOR, 7])
    assert index.positions(5).tolist() == [0, 2, 4]
    assert index.positions(7).tolist() == [1, 6]
    assert index.positions(8).tolist() == []
    assert index.positions(SEPARATOR).tolist() == []
    assert index.tokens.tolist() == [5, 7, 5, 9, 5, -1, 7]


def test_one_by_one_equals_at_once_through_rebuilds():
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 50, 3000).tolist()
    whole = TokenIndex(tokens)
    grown = TokenIndex()
    for t in tokens:     # 3000 appends: the tail is folded into the bulk several times
        grown.extend([t])
    assert grown.length == 3000
    for t in range(50):
        expected = [i for i, x in enumerate(tokens) if x == t]
        assert whole.positions(t).tolist() == expected
        assert grown.positions(t).tolist() == expected


def test_truncate_front_shifts_positions():
    index = TokenIndex([1, 2, 1, SEPARATOR, 2, 1])
    cut = index.truncate_front(3)
    assert cut.tokens.tolist() == [SEPARATOR, 2, 1]
    assert cut.positions(1).tolist() == [2]
