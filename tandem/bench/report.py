"""A run's report: JSON with every sample, and a markdown summary.

JSON layout (schema "tandem.bench.report/1"):
  {"schema", "label", "meta": {command, date, machine, url, model, endpoint, workload, load,
   slo, client}, "summary": metrics.Summary as a dict, "samples": [RequestSample.to_dict()]}
The summary is recomputed from the samples when a report is loaded, so a report edited or
produced by another version still compares on equal terms.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import orjson

from tandem.bench.metrics import SLO, Distribution, Summary, summarize
from tandem.bench.sample import RequestSample

SCHEMA = "tandem.bench.report/1"
REQUIRED_KEYS = ("schema", "label", "meta", "summary", "samples")


def machine_info() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": platform.node(), "os": platform.platform(), "cpu": cpu,
            "cores": os.cpu_count(), "python": sys.version.split()[0]}


def git_commit(cwd: str | Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=cwd or Path(__file__).resolve().parent, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def build_report(label: str, samples: list[RequestSample], meta: dict, slo: SLO) -> dict:
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine_info(), "tandem_commit": git_commit(), "slo": asdict(slo), **meta}
    return {"schema": SCHEMA, "label": label, "meta": meta,
            "summary": summarize(samples, slo).to_dict(),
            "samples": [s.to_dict() for s in samples]}


def write_json(report: dict, path: str | Path) -> None:
    Path(path).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))


def validate_report(d: dict) -> None:
    """Raise ValueError unless d looks like a report this version can read."""
    missing = [k for k in REQUIRED_KEYS if k not in d]
    if missing:
        raise ValueError(f"not a tandem bench report: missing {missing}")
    if d["schema"] != SCHEMA:
        raise ValueError(f"unsupported report schema {d['schema']!r} (this version reads {SCHEMA})")
    if not isinstance(d["samples"], list):
        raise ValueError("report 'samples' must be a list")


def load_report(path: str | Path) -> tuple[dict, list[RequestSample], Summary]:
    d = orjson.loads(Path(path).read_bytes())
    validate_report(d)
    samples = [RequestSample.from_dict(s) for s in d["samples"]]
    slo = SLO(**(d["meta"].get("slo") or {}))
    return d, samples, summarize(samples, slo)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def distribution_rows(summary: Summary) -> list[str]:
    rows = ["| latency (ms) | count | mean | p50 | p90 | p99 | max |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, d in (("TTFT", summary.ttft), ("ITL", summary.itl), ("TPOT", summary.tpot), ("E2E", summary.e2e)):
        assert isinstance(d, Distribution)
        rows.append(f"| {name} | {d.count} | {_ms(d.mean)} | {_ms(d.p50)} | {_ms(d.p90)} | {_ms(d.p99)} | {_ms(d.max)} |")
    return rows


def route_counts(samples: list[dict]) -> dict[str, int]:
    """Requests per (prefill worker -> decode worker) from the gateway's response headers."""
    counts: dict[str, int] = {}
    for d in samples:
        h = d.get("headers") or {}
        if h:
            key = f"{h.get('x-tandem-prefill', '?')} -> {h.get('x-tandem-decode', '?')}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def to_markdown(report: dict, summary: Summary, plots: list[str] = ()) -> str:
    meta = report["meta"]
    wl = meta.get("workload", {})
    lines = [f"# Benchmark: {report['label']}", "",
             f"- command: `{meta.get('command', '')}`",
             f"- date: {meta.get('date')}; commit: {meta.get('tandem_commit')}",
             f"- machine: {meta.get('machine', {}).get('cpu')}, {meta.get('machine', {}).get('cores')} cores",
             f"- target: {meta.get('url')} model `{meta.get('model')}` via /v1/{meta.get('endpoint')}",
             f"- workload: {wl.get('kind')} ({', '.join(f'{k}={v}' for k, v in wl.items() if k != 'kind')})",
             f"- load: {meta.get('load')}", ""]
    lines += distribution_rows(summary)
    s = summary
    lines += ["", "| throughput | value |", "|---|---:|",
              f"| requests sent / completed / errors | {s.requests} / {s.completed} / {s.errors} |",
              f"| duration (s) | {s.duration_s:.2f} |",
              f"| requests/s | {s.request_throughput:.3f} |",
              f"| output tokens/s | {s.output_throughput:.1f} |",
              f"| total tokens/s (prompt + output) | {s.total_throughput:.1f} |"]
    slo = meta.get("slo") or {}
    if s.goodput is not None:
        limits = ", ".join(f"{k[:-2]} <= {v * 1000:.0f} ms" for k, v in slo.items() if v is not None)
        lines.append(f"| goodput ({limits}) | {s.goodput:.3f} req/s ({_pct(s.slo_attainment)} of requests) |")
    lines += ["", "| prefix cache | tokens | of prompt tokens |", "|---|---:|---:|",
              f"| prompt tokens | {s.prompt_tokens} | |",
              f"| cached (measured, usage.prompt_tokens_details) | {'-' if s.cached_tokens is None else s.cached_tokens} | {_pct(s.cached_ratio)} |",
              f"| ideal (infinite cache, from the workload) | {s.ideal_cached_tokens} | {_pct(s.ideal_cached_ratio)} |"]
    if s.cached_ratio is not None and s.ideal_cached_ratio:
        lines.append(f"| measured / ideal | | {_pct(s.cached_ratio / s.ideal_cached_ratio)} |")
    routes = route_counts(report["samples"])
    if routes:
        lines += ["", "| routed to (x-tandem-prefill -> x-tandem-decode) | requests |", "|---|---:|"]
        lines += [f"| {route} | {n} |" for route, n in sorted(routes.items())]
    if s.error_kinds:
        lines += ["", "Errors: " + ", ".join(f"{k}: {v}" for k, v in sorted(s.error_kinds.items()))]
    if plots:
        lines += [""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(lines) + "\n"
