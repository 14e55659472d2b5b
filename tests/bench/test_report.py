"""Report JSON schema, markdown summary and plots."""

from __future__ import annotations

import orjson
import pytest

from tandem.bench.metrics import SLO
from tandem.bench.plots import plot_cdfs, plot_timeline, timeline
from tandem.bench.report import SCHEMA, build_report, load_report, to_markdown, validate_report, write_json
from tandem.bench.sample import RequestSample


def samples():
    return [RequestSample(request_id=f"r{i}", session_id="s", turn=i, start=i * 0.5, end=i * 0.5 + 1.0,
                          chunk_times=[0.2, 0.5, 0.9], chunk_tokens=[1, 2, 1], prompt_tokens=40,
                          completion_tokens=4, cached_tokens=16 * i, ideal_cached_tokens=20 * i,
                          status=200) for i in range(3)]


def test_report_json_schema_round_trip(tmp_path):
    report = build_report("run-a", samples(), {"command": "tandem bench serve", "url": "u"}, SLO(ttft_s=0.3))
    path = tmp_path / "r.json"
    write_json(report, path)
    d = orjson.loads(path.read_bytes())
    assert d["schema"] == SCHEMA and d["label"] == "run-a"
    assert set(d) == {"schema", "label", "meta", "summary", "samples"}
    assert {"date", "machine", "command", "slo"} <= set(d["meta"])
    assert d["meta"]["slo"] == {"ttft_s": 0.3, "tpot_s": None, "e2e_s": None}
    s0 = d["samples"][1]
    assert s0["chunk_times"] == [0.2, 0.5, 0.9] and s0["chunk_tokens"] == [1, 2, 1]
    assert s0["ttft"] == 0.2 and s0["itl"] == pytest.approx([0.3, 0.4]) and s0["cached_tokens"] == 16
    assert d["summary"]["ttft"]["p50"] == pytest.approx(0.2)
    _, loaded, summary = load_report(path)
    assert [s.request_id for s in loaded] == ["r0", "r1", "r2"]
    assert summary.goodput is not None and summary.cached_ratio == pytest.approx(48 / 120)


def test_validate_rejects_other_files():
    with pytest.raises(ValueError, match="missing"):
        validate_report({"schema": SCHEMA})
    with pytest.raises(ValueError, match="schema"):
        validate_report({"schema": "x", "label": "", "meta": {}, "summary": {}, "samples": []})


def test_markdown_summary_has_latency_throughput_and_cache(tmp_path):
    from tandem.bench.metrics import summarize
    report = build_report("run-a", samples(), {"command": "cmd", "workload": {"kind": "trace"}}, SLO(ttft_s=0.3))
    md = to_markdown(report, summarize(samples(), SLO(ttft_s=0.3)), plots=[str(tmp_path / "x-cdf.png")])
    assert "| TTFT | 3 |" in md and "| ITL | 6 |" in md
    assert "output tokens/s" in md and "goodput (ttft <= 300 ms)" in md
    assert "| cached (measured" in md and "40.0%" in md and "50.0%" in md
    assert "![x-cdf](x-cdf.png)" in md
    assert "routed to" not in md   # no gateway headers in these samples


def test_route_counts_from_gateway_headers():
    from tandem.bench.report import route_counts
    rows = [{"headers": {"x-tandem-prefill": "p0", "x-tandem-decode": "d1"}},
            {"headers": {"x-tandem-prefill": "p0", "x-tandem-decode": "d1"}},
            {"headers": {"x-tandem-prefill": "w0", "x-tandem-decode": "w0"}}, {"headers": {}}]
    assert route_counts(rows) == {"p0 -> d1": 2, "w0 -> w0": 1}


def test_timeline_counts_tokens_and_inflight():
    tl = timeline(samples(), bin_s=0.5)
    # 3 requests x 4 tokens; bins of 0.5 s over [0, 2)
    assert tl["tokens_per_s"].sum() * 0.5 == pytest.approx(12)
    assert tl["inflight_requests"].tolist() == [1, 2, 2, 1]
    # sampled mid-bin. t=0.75: r0 has prompt 40 + 3 tokens (chunks at 0.2, 0.5), r1 40 + 1 (at 0.7)
    assert tl["inflight_tokens"][1] == 43 + 41
    assert tl["inflight_tokens"][0] == 41   # t=0.25: r0's first chunk (0.2) is in


def test_timeline_scales_chunks_to_usage_tokens():
    s = RequestSample(request_id="r", start=0.0, end=1.0, chunk_times=[0.1, 0.6], chunk_tokens=[1, 1],
                      prompt_tokens=10, completion_tokens=6, status=200)
    tl = timeline([s], bin_s=0.5)
    assert tl["tokens_per_s"].tolist() == [6.0, 6.0]          # 3 tokens per chunk, per 0.5 s
    assert tl["inflight_tokens"].tolist() == [13.0, 16.0]     # sampled at 0.25 and 0.75


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    a = plot_cdfs({"a": samples()}, tmp_path / "cdf.png")
    b = plot_timeline(samples(), tmp_path / "tl.png")
    for p in (a, b):
        data = open(p, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
