import math

from tandem.router.latency_window import HistogramWindow, quantile

INF = math.inf


def test_quantile_interpolates_inside_the_bucket():
    # 10 observations: 4 in (0, 0.1], 4 in (0.1, 0.5], 2 in (0.5, 1.0]
    r = ((0.1, 4.0), (0.5, 8.0), (1.0, 10.0), (INF, 10.0))
    assert quantile(r, 0.5) == 0.1 + 0.4 * (5 - 4) / 4          # rank 5: 1 of 4 into (0.1, 0.5]
    assert quantile(r, 0.9) == 0.5 + 0.5 * (9 - 8) / 2
    assert quantile(r, 0.4) == 0.1


def test_rank_in_the_inf_bucket_answers_the_last_bound_and_empty_is_none():
    assert quantile(((0.1, 1.0), (1.0, 1.0), (INF, 10.0)), 0.9) == 1.0
    assert quantile(((0.1, 0.0), (INF, 0.0)), 0.9) is None
    assert quantile((), 0.9) is None


def test_window_is_the_difference_of_two_readings():
    win = HistogramWindow()
    assert win.advance(((0.1, 2.0), (INF, 3.0))) == ((0.1, 2.0), (INF, 3.0))
    assert win.advance(((0.1, 2.0), (INF, 7.0))) == ((0.1, 0.0), (INF, 4.0))
    assert quantile(win.advance(((0.1, 2.0), (INF, 7.0))), 0.9) is None
