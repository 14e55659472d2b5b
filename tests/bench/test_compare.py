"""Side-by-side comparison: ratios against the first run."""

from __future__ import annotations

from tandem.bench.compare import METRICS, compare_files, compare_table, ratio
from tandem.bench.metrics import SLO, summarize
from tandem.bench.report import build_report, write_json
from tandem.bench.sample import RequestSample


def run(ttft, tokens_per_s_scale=1.0):
    return [RequestSample(request_id=f"r{i}", start=float(i), end=float(i) + 1.0 / tokens_per_s_scale,
                          chunk_times=[ttft, ttft + 0.01], chunk_tokens=[1, 1], prompt_tokens=10,
                          completion_tokens=2, status=200) for i in range(4)]


def test_ratio():
    assert ratio(2.0, 4.0) == 0.5
    assert ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


def test_compare_table_ratios_against_first():
    a, b = summarize(run(0.100)), summarize(run(0.050))
    table = compare_table([("A", a), ("B", b)])
    row = next(line for line in table.splitlines() if line.startswith("| TTFT p50 "))
    assert "100.0 ms" in row and "50.0 ms (x0.50)" in row
    assert table.splitlines()[0] == "| metric | better | A | B |"
    assert len(table.strip().splitlines()) == 2 + len(METRICS)


def test_compare_files_reads_reports(tmp_path):
    paths = []
    for name, ttft in (("base", 0.2), ("fast", 0.1), ("slow", 0.4)):
        p = tmp_path / f"{name}.json"
        write_json(build_report(name, run(ttft), {"command": "x"}, SLO()), p)
        paths.append(p)
    text = compare_files(paths)
    row = next(line for line in text.splitlines() if line.startswith("| TTFT p50 "))
    assert "(x0.50)" in row and "(x2.00)" in row
    assert "| base | fast | slow |" in text
