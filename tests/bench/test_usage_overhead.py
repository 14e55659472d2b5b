"""benchmarks/usage_overhead.py --smoke: the four gateways (off, ledger, API keys, accounts) run side
by side on a tiny model; `on` authenticates with a real account token (made with `tandem
accounts`), its ledger holds every request sent to it once, and the table pairs each with off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(400)


def test_the_usage_benchmark_runs_with_accounts_on(llama_dir, tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, str(REPO / "benchmarks/usage_overhead.py"), "--model", str(llama_dir),
                          "--smoke", "--rounds", "2", "--worker-core", str(cores[0]),
                          "--gateway-core", str(cores[-1]), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=360, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    report = orjson.loads((tmp_path / "usage_overhead.json").read_bytes())
    meta, res = report["meta"], report["results"]
    assert (meta["rounds"], meta["warmup"]) == (2, 1)
    assert "--accounts" in meta["gateways"]["on"] and "--api-key" not in meta["gateways"]["on"]
    assert "--api-key" in meta["gateways"]["keys"]
    # every request to `on` (1 warm-up + 2 rounds, both kinds) is in its account's ledger once
    assert res["on_ledger_requests"] == res["keys_ledger_requests"] == 6
    for kind in ("nonstream", "stream_ttft"):
        assert set(res[kind]) == {"direct", "off", "ledger", "keys", "on",
                                  "ledger_minus_off", "keys_minus_off", "on_minus_off"}
        assert len(report["samples"]["on"][kind]) == 2 and all(x > 0 for x in report["samples"]["on"][kind])
    assert "| on_minus_off |" in out.stdout
