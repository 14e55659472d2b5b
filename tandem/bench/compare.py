"""Runs side by side: one column per run, each value with its ratio to the first run's.

A ratio is value / baseline value, whatever the metric's direction: for latencies below 1
is better, for throughputs and hit ratios above 1 is better (the `better` column says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tandem.bench.metrics import Summary
from tandem.bench.report import load_report


@dataclass(frozen=True)
class Metric:
    name: str
    better: str          # "lower" | "higher"
    unit: str            # "ms" (values in s, shown in ms), "/s", "%", ""

    def get(self, s: Summary) -> float | None:
        path = self.key.split(".")
        v = getattr(s, path[0])
        for p in path[1:]:
            v = None if v is None else getattr(v, p)
        return v

    @property
    def key(self) -> str:
        return _KEYS[self.name]


_KEYS = {
    "TTFT p50": "ttft.p50", "TTFT p90": "ttft.p90", "TTFT p99": "ttft.p99",
    "ITL p50": "itl.p50", "ITL p90": "itl.p90", "ITL p99": "itl.p99",
    "TPOT p50": "tpot.p50", "TPOT p90": "tpot.p90",
    "E2E p50": "e2e.p50", "E2E p90": "e2e.p90", "E2E p99": "e2e.p99",
    "requests/s": "request_throughput", "output tokens/s": "output_throughput",
    "total tokens/s": "total_throughput", "goodput (req/s)": "goodput",
    "cached ratio": "cached_ratio", "ideal cached ratio": "ideal_cached_ratio",
    "completed": "completed", "errors": "errors",
}

METRICS = tuple(Metric(name, better, unit) for name, better, unit in (
    ("TTFT p50", "lower", "ms"), ("TTFT p90", "lower", "ms"), ("TTFT p99", "lower", "ms"),
    ("ITL p50", "lower", "ms"), ("ITL p90", "lower", "ms"), ("ITL p99", "lower", "ms"),
    ("TPOT p50", "lower", "ms"), ("TPOT p90", "lower", "ms"),
    ("E2E p50", "lower", "ms"), ("E2E p90", "lower", "ms"), ("E2E p99", "lower", "ms"),
    ("requests/s", "higher", "/s"), ("output tokens/s", "higher", "/s"),
    ("total tokens/s", "higher", "/s"), ("goodput (req/s)", "higher", "/s"),
    ("cached ratio", "higher", "%"), ("ideal cached ratio", "higher", "%"),
    ("completed", "higher", ""), ("errors", "lower", ""),
))


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return value / base


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v * 1000:.1f}"
    if unit == "%":
        return f"{100 * v:.1f}%"
    if unit == "/s":
        return f"{v:.2f}"
    return f"{v:g}"


def compare_table(runs: list[tuple[str, Summary]]) -> str:
    """Markdown table: metrics as rows, runs as columns, `value (x ratio to the first run)`."""
    head = "| metric | better | " + " | ".join(label for label, _ in runs) + " |"
    rows = [head, "|---|---|" + "---:|" * len(runs)]
    base = runs[0][1]
    for m in METRICS:
        cells = []
        for i, (_, s) in enumerate(runs):
            v = m.get(s)
            cell = _fmt(v, m.unit) + (" ms" if m.unit == "ms" and v is not None else "")
            r = ratio(v, m.get(base))
            if i > 0 and r is not None:
                cell += f" (x{r:.2f})"
            cells.append(cell)
        rows.append(f"| {m.name} | {m.better} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def compare_files(paths: list[str | Path], labels: list[str] | None = None) -> str:
    runs = []
    for i, p in enumerate(paths):
        d, _samples, summary = load_report(p)
        label = labels[i] if labels and i < len(labels) else d["label"]
        runs.append((label, summary))
    header = "# Comparison\n\nRatios are against the first column (" + runs[0][0] + ").\n\n"
    return header + compare_table(runs)
