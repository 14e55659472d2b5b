"""benchmarks/agentic_sched.py --smoke: tandem on and off, each a real gateway over a real worker
on a tiny model, run workload A (agentic sessions, KV cache sized from the model's bytes per
token) and B (the same sessions beside a priority-10 flood); every row of the report is there,
vLLM is skipped with its reason, and the JSON holds every reading."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def test_smoke_reports_every_row(tmp_path):
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(REPO / "benchmarks/agentic_sched.py"), "--smoke",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    elapsed = time.monotonic() - start
    table = (tmp_path / "agentic_sched.md").read_text()
    assert table in out.stdout
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| system")]
    assert [r.split(" | ")[0] for r in rows] == ["| on", "| off", "| vllm", "| on", "| off"]
    assert "| vllm | skipped: --no-vllm |" in table
    report = orjson.loads((tmp_path / "agentic_sched.json").read_bytes())
    z = report["sizing"]
    assert z["kv_cache_bytes_per_worker"] == z["blocks_per_worker"] * 16 * z["kv_bytes_per_token"]
    assert z["oversubscription"] >= 2.5 and z["live_tokens"] >= 3 * z["session_tokens"]
    readings = {(r["system"], r["workload"]): r for r in report["readings"]}
    assert set(readings) == {("on", "A"), ("on", "B"), ("off", "A"), ("off", "B")}
    for (system, workload), r in readings.items():
        summary = r["summary"]
        assert summary["completed"] == summary["requests"] == 4 * 3, (system, workload, summary["error_kinds"])
        assert 0 < r["cached_of_ideal"] <= 1.0 + 1e-9 and r["ttft_p90_s"] >= r["ttft_p50_s"] > 0
        assert len(r["samples"]) == 12
        assert (r["flood_ok"] > 0) == (workload == "B")           # the flood ran beside B only
    figures = report["figures"]
    assert figures["A"]["off"]["ttft_p90_vs_off"] == pytest.approx(1.0)
    assert figures["A"]["on"]["cached_vs_off"] > 0 and figures["B"]["on"]["ratio"] > 0
    assert figures["A"]["vllm"] == {"skipped": "--no-vllm"}
    # the smoke mode promises under 60 s on a quiet machine; a loaded one gets slack
    assert elapsed < 180
