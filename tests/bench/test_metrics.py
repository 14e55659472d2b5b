"""Percentiles, TPOT/ITL, throughput, goodput and cache ratios from samples."""

from __future__ import annotations

import pytest

from tandem.bench.metrics import SLO, Distribution, summarize
from tandem.bench.sample import RequestSample


def sample(start, ttft, gaps, tokens=None, prompt=100, cached=None, ideal=0, error=None):
    times = [ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestSample(request_id="r", start=start, end=start + times[-1] + 0.001,
                         chunk_times=times, chunk_tokens=[1] * len(times),
                         prompt_tokens=prompt, completion_tokens=tokens or len(times),
                         cached_tokens=cached, ideal_cached_tokens=ideal, error=error,
                         status=200 if error is None else 500)


def test_distribution_percentiles_interpolate_linearly():
    d = Distribution.of([float(x) for x in range(1, 101)])
    assert d.count == 100 and d.mean == pytest.approx(50.5)
    assert d.p50 == pytest.approx(50.5) and d.p90 == pytest.approx(90.1) and d.p99 == pytest.approx(99.01)
    assert d.max == 100.0
    assert Distribution.of([]).p50 is None


def test_sample_derived_latencies():
    s = sample(1.0, 0.5, [0.1, 0.2, 0.3])
    assert s.ttft == 0.5
    assert s.itl == pytest.approx([0.1, 0.2, 0.3])
    assert s.tpot == pytest.approx(0.6 / 3)
    # 2 chunks carrying 5 tokens: TPOT divides by tokens, ITL stays per chunk
    multi = sample(0.0, 0.2, [0.4], tokens=5)
    assert multi.tpot == pytest.approx(0.4 / 4) and multi.itl == pytest.approx([0.4])


def test_summary_throughput_goodput_and_cache_ratios():
    samples = [
        sample(0.0, 0.1, [0.05] * 9, prompt=100, cached=50, ideal=60),   # ttft 100 ms, tpot 50 ms
        sample(0.5, 0.3, [0.02] * 9, prompt=100, cached=0, ideal=40),    # ttft 300 ms
        sample(1.0, 0.1, [0.01] * 9, prompt=200, cached=100, ideal=100),
        sample(1.5, 0.1, [0.01], error="http 503: busy"),
    ]
    s = summarize(samples, SLO(ttft_s=0.2, tpot_s=0.04))
    assert (s.requests, s.completed, s.errors) == (4, 3, 1)
    duration = max(x.end for x in samples) - 0.0
    assert s.duration_s == pytest.approx(duration)
    assert s.completion_tokens == 30 and s.prompt_tokens == 400
    assert s.output_throughput == pytest.approx(30 / duration)
    assert s.request_throughput == pytest.approx(3 / duration)
    # only the third request meets both SLOs (first: tpot 50 ms; second: ttft 300 ms; fourth failed)
    assert s.goodput == pytest.approx(1 / duration) and s.slo_attainment == pytest.approx(0.25)
    assert s.cached_ratio == pytest.approx(150 / 400)
    assert s.ideal_cached_ratio == pytest.approx(200 / 400)
    assert s.itl.count == 27 and s.ttft.count == 3
    assert s.error_kinds == {"http 500": 1}


def test_no_slo_means_no_goodput_and_missing_cached_is_none():
    s = summarize([sample(0, 0.1, [0.1])])
    assert s.goodput is None and s.slo_attainment is None and s.cached_ratio is None


def test_empty_run():
    s = summarize([])
    assert s.requests == 0 and s.output_throughput == 0.0 and s.ttft.p50 is None
