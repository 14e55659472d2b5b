"""`tandem bench serve` against a live `tandem serve` on a tiny test model (two processes).

Checks the numbers that must hold whatever the speed: every request completes, token-id
prompts arrive with their exact lengths, outputs have the workload's lengths (ignore_eos), and
with a generous KV cache the measured cached tokens equal the trace's ideal.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tandem.testing.server_process import stop, wait_healthy
from tests.bench.fake_server import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(llama_dir, tmp_path):
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "tandem", "serve", "--model", str(llama_dir),
                             "--port", str(port), "--threads", "1"],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120, poll_s=0.5, describe=lambda: (tmp_path / "serve.log").read_text()[-3000:])
        yield url
    finally:
        stop(proc, signal.SIGINT, grace_s=20)
        log.close()


def bench(args, tmp_path):
    out = subprocess.run([sys.executable, "-m", "tandem", "bench", "serve", *args, "--out", str(tmp_path),
                          "--no-progress", "--no-plots"], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_trace_replay_and_agentic_against_tandem_serve(server, llama_dir, tmp_path):
    # 512-token blocks -> 16 tokens; every request ends with a new block, shares block 0 (and 1)
    rows = [{"timestamp": 20 * i, "input_length": 512 * (2 + i % 2), "output_length": 8,
             "hash_ids": [0, 1, 100 + i] if i % 2 else [0, 100 + i]} for i in range(6)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stdout = bench(["--url", server, "--trace", str(trace), "--tokenizer", str(llama_dir),
                    "--label", "trace", "--time-scale", "1"], tmp_path)
    assert "completed 6/6" in stdout
    report = orjson.loads((tmp_path / "trace.json").read_bytes())
    samples = report["samples"]
    assert [s["prompt_tokens"] for s in samples] == [32, 48, 32, 48, 32, 48]
    assert all(s["completion_tokens"] == 8 and s["error"] is None for s in samples)
    assert [s["ideal_cached_tokens"] for s in samples] == [0, 16, 16, 32, 16, 32]
    assert [s["cached_tokens"] for s in samples] == [0, 16, 16, 32, 16, 32]
    assert report["summary"]["ttft"]["p50"] > 0 and report["summary"]["itl"]["count"] > 0

    bench(["--url", server, "--agentic", "--sessions", "2", "--turns", "2", "--tenants", "1",
           "--system-tokens", "40", "--tool-tokens", "16", "--num-tools", "2", "--user-tokens", "8",
           "--tool-result-tokens", "8", "--output-tokens", "6", "--think-time", "0", "--label", "agentic"],
          tmp_path)
    agentic = orjson.loads((tmp_path / "agentic.json").read_bytes())
    assert agentic["summary"]["completed"] == 4 and agentic["meta"]["endpoint"] == "chat"
    second_turns = [s for s in agentic["samples"] if s["turn"] == 1]
    assert all(s["cached_tokens"] > 0 for s in second_turns)   # the resent history hits the cache
