"""The sliding-window arithmetic, with exact numbers."""

from __future__ import annotations

import pytest

from tandem.usage.limits import Limit
from tandem.usage.window import (
    Counts, WindowState, estimate, exceeded, fits, remaining, reset_s, wait_s,
)


def state(prev: Counts, cur: Counts, elapsed: float, admitted: bool = True) -> WindowState:
    return WindowState(now=600.0 + elapsed, index=10, prev=prev, cur=cur, admitted=admitted)


def test_the_previous_window_weighs_what_is_left_of_it():
    assert estimate(10, 4, 15.0) == 11.5          # 10 * 45/60 + 4
    assert estimate(10, 4, 0.0) == 14.0
    assert estimate(10, 4, 59.999) == pytest.approx(4.00017)


def test_a_request_fits_while_every_limited_count_stays_within_its_limit():
    lim = Limit(requests=12, input_tokens=100)
    prev, cur = Counts(10, 50, 0), Counts(4, 10, 0)
    assert not fits(lim, prev, cur, 15.0, Counts(1, 0, 0))    # 11.5 + 1 > 12
    assert fits(lim, prev, cur, 30.0, Counts(1, 0, 0))        # 5 + 4 + 1 = 10
    assert fits(lim, prev, cur, 30.0, Counts(1, 65, 0))       # 25 + 10 + 65 = 100
    assert not fits(lim, prev, cur, 30.0, Counts(1, 66, 0))
    assert fits(Limit(), prev, cur, 0.0, Counts(10**6, 10**9, 10**9))   # no limit at all
    s = state(prev, cur, 15.0, admitted=False)
    assert exceeded(lim, s, Counts(1, 80, 0)) == ["requests", "input_tokens"]   # 37.5+10+80 > 100


def test_remaining_and_reset_for_the_headers():
    s = state(Counts(10, 0, 0), Counts(4, 0, 0), 15.0)
    assert remaining(12, s, "requests") == 0        # 12 - 11.5 = 0.5, floored
    assert remaining(20, s, "requests") == 8        # 20 - 11.5 = 8.5
    assert reset_s(s, "requests") == 105.0          # this window's counts last to the next's end
    only_prev = state(Counts(10, 0, 0), Counts(), 15.0)
    assert reset_s(only_prev, "requests") == 45.0
    assert reset_s(state(Counts(), Counts(), 15.0), "requests") == 0.0


def test_the_wait_until_a_refused_request_fits():
    s = state(Counts(10, 0, 0), Counts(4, 0, 0), 15.0, admitted=False)
    # the previous window's share must fall to 12 - 1 - 4 = 7: 10 * (1 - 18/60) = 7 at 18 s
    assert wait_s(12, s, "requests", 1) == pytest.approx(3.0)
    assert wait_s(20, s, "requests", 1) == 0.0      # fits now
    # this window alone is over: wait for the next one, as this count decays there
    over = state(Counts(), Counts(0, 0, 6), 50.0, admitted=False)
    assert wait_s(5, over, "output_tokens", 1) == pytest.approx(30.0)   # 10 s, then 6 * (1 - 20/60) + 1 = 5
    assert wait_s(5, over, "output_tokens", 6) is None                  # never: 6 > 5 alone
