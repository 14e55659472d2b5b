"""The EAGLE-3 tap's per-request buffer of target states: appends, replacements, the row cap."""

from __future__ import annotations

import torch

from tandem.spec.eagle3_features import PendingFeatures


def rows(first: int, n: int) -> torch.Tensor:
    """n rows [n, 1, 1] holding their own positions."""
    return torch.arange(first, first + n, dtype=torch.float32).view(n, 1, 1)


def positions(t: torch.Tensor) -> list[int]:
    return [int(x) for x in t.flatten()]


def test_appends_replacements_and_the_cap():
    p = PendingFeatures()
    p.add(0, rows(0, 10), max_rows=100)          # a prompt chunk
    for pos in range(10, 20):                     # decode steps, one row each
        p.add(pos, rows(pos, 1), max_rows=100)
    assert p.held == 20 and p.replaced_from == 0
    p.add(15, rows(15, 3) + 1000, max_rows=100)   # a verify step recomputed 15..17: 18.. dropped
    assert p.held == 18
    first, aux = p.take(17)
    assert first == 0 and positions(aux) == list(range(15)) + [1015, 1016, 1017]
    assert (p.chunks, p.held, p.replaced_from) == ([], 0, None)

    for pos in range(30, 40):
        p.add(pos, rows(pos, 1), max_rows=4)      # the oldest rows go beyond 4
    assert p.held == 4
    first, aux = p.take(39)
    assert first == 36 and positions(aux) == [36, 37, 38, 39]


def test_take_stops_at_a_gap():
    p = PendingFeatures()
    p.add(0, rows(0, 5), max_rows=100)
    p.add(8, rows(8, 2), max_rows=100)            # positions 5..7 never arrived
    first, aux = p.take(9)
    assert first == 8 and positions(aux) == [8, 9]
    p.add(0, rows(0, 3), max_rows=100)
    assert p.take(5) is None                      # position 5 is not held
