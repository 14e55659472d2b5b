"""benchmarks/peers/transformers_floor.py writes a regular bench report (exact lengths, per-token times)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]


def test_transformers_floor_on_a_tiny_model(llama_dir, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 0, "input_length": 512 * (i + 1), "output_length": 4,
                                         "hash_ids": list(range(i + 1))}) + "\n" for i in range(3)))
    out = subprocess.run([sys.executable, str(REPO / "benchmarks/peers/transformers_floor.py"),
                          "--model", str(llama_dir), "--trace", str(trace), "--max-requests", "2",
                          "--out", str(tmp_path), "--label", "floor", "--no-plots"],
                         capture_output=True, text=True, timeout=180, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    report = orjson.loads((tmp_path / "floor.json").read_bytes())
    samples = report["samples"]
    assert [s["prompt_tokens"] for s in samples] == [16, 32]
    assert all(s["completion_tokens"] == 4 and len(s["chunk_times"]) == 4 for s in samples)
    assert all(0 < s["ttft"] <= s["e2e"] for s in samples)
    assert samples[1]["start"] >= samples[0]["end"]          # one request at a time
    assert report["summary"]["ideal_cached_tokens"] == 16    # block 0 repeats


def test_transformers_floor_agentic_ideal_uses_real_token_counts(llama_dir, tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks/peers/transformers_floor.py"),
                          "--model", str(llama_dir), "--agentic", "--sessions", "1", "--turns", "2",
                          "--system-tokens", "10", "--tool-tokens", "4", "--num-tools", "1", "--user-tokens", "4",
                          "--tool-result-tokens", "4", "--output-tokens", "3", "--out", str(tmp_path),
                          "--label", "floor", "--no-plots"],
                         capture_output=True, text=True, timeout=180, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = orjson.loads((tmp_path / "floor.json").read_bytes())["samples"]
    assert first["ideal_cached_tokens"] == 0
    assert second["ideal_cached_tokens"] == first["prompt_tokens"] + first["completion_tokens"] - 1
    assert second["prompt_tokens"] > second["ideal_cached_tokens"]
