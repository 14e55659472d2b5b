"""`tandem bench serve` and `tandem bench compare` end to end against the fake server."""

from __future__ import annotations

import json

import orjson
import pytest

from tandem.cli import main
from tests.bench.fake_server import FakeServer, FakeState


def test_bench_serve_trace_writes_report_plots_and_compare(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 10 * i, "input_length": 1024, "output_length": 5,
                                         "hash_ids": [0, i + 1]}) + "\n" for i in range(6)))
    with FakeServer(FakeState()) as server:
        args = ["bench", "serve", "--url", server.url, "--trace", str(trace), "--vocab-range", "10:500",
                "--max-requests", "4", "--out", str(tmp_path / "out"), "--label", "base",
                "--slo-ttft-ms", "1000", "--no-progress"]
        assert main(args) == 0
        args[args.index("base")] = "again"
        assert main(args + ["--no-plots"]) == 0
    out = tmp_path / "out"
    report = orjson.loads((out / "base.json").read_bytes())
    assert report["meta"]["model"] == "fake-model" and report["meta"]["endpoint"] == "completions"
    assert len(report["samples"]) == 4 and report["summary"]["completed"] == 4
    # ids 1..4 are new; id 0 repeats: ideal = 3 x 16 tokens of 4 x 32
    assert report["summary"]["ideal_cached_tokens"] == 48
    assert report["summary"]["cached_tokens"] == 48
    assert report["summary"]["goodput"] > 0
    from tandem.bench.serve import plots_available
    if plots_available():
        assert (out / "base-cdf.png").exists() and (out / "base-timeline.png").exists()
    assert not (out / "again-cdf.png").exists()
    assert "| TTFT | 4 |" in (out / "base.md").read_text()
    capsys.readouterr()
    assert main(["bench", "compare", str(out / "base.json"), str(out / "again.json"),
                 "--out", str(out / "cmp.md")]) == 0
    printed = capsys.readouterr().out
    assert "| metric | better | base | again |" in printed
    assert (out / "cmp.md").read_text() == printed


def test_bench_serve_agentic_uses_chat(tmp_path):
    with FakeServer(FakeState(block_size=4)) as server:
        assert main(["bench", "serve", "--url", server.url, "--agentic", "--sessions", "2", "--turns", "2",
                     "--system-tokens", "20", "--tool-tokens", "8", "--num-tools", "2", "--output-tokens", "3",
                     "--think-time", "0", "--out", str(tmp_path), "--label", "ag", "--no-plots",
                     "--no-progress"]) == 0
        assert all("messages" in b for b in server.state.bodies)
    report = orjson.loads((tmp_path / "ag.json").read_bytes())
    assert report["meta"]["endpoint"] == "chat" and report["summary"]["completed"] == 4
    assert report["meta"]["workload"]["kind"] == "agentic"


def test_flags_become_configs():
    import argparse

    from tandem.cli.bench import _up_args, config_from_args, register
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    a = parser.parse_args(["bench", "serve", "--url", "http://h:1", "--agentic", "--request-rate", "2",
                           "--slo-ttft-ms", "250", "--no-ignore-eos"])
    cfg = config_from_args(a)
    assert cfg.load.concurrency is None and cfg.agentic.session_rate == 2.0 and cfg.trace.request_rate is None
    assert cfg.slo.ttft_s == 0.25 and cfg.ignore_eos is False
    a = parser.parse_args(["bench", "serve", "--url", "u", "--agentic"])
    assert config_from_args(a).load.concurrency == 4           # agentic default: closed loop
    assert config_from_args(a).agentic.think_time_range_s is None
    a = parser.parse_args(["bench", "serve", "--url", "u", "--agentic", "--think-time-range", "0.5:10",
                           "--no-session-header"])
    assert config_from_args(a).agentic.think_time_range_s == (0.5, 10.0)
    assert config_from_args(a).agentic.affinity_header is False
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "serve", "--url", "u", "--agentic", "--think-time-range", "10:1"])
    a = parser.parse_args(["bench", "serve", "--url", "u", "--trace", "t.jsonl", "--time-scale", "0.1"])
    cfg = config_from_args(a)
    assert cfg.load.concurrency is None and cfg.trace.time_scale == 0.1   # trace default: open loop
    a = parser.parse_args(["bench", "topology", "--model", "m", "--configs", "colocated:1", "--agentic",
                           "--worker-threads", "1", "--worker-arg=--block-size=32",
                           "--tandem-args=--log-level warning"])
    assert _up_args(a) == ("--worker-arg=--block-size=32", "--worker-arg=--threads=1", "--log-level", "warning")
