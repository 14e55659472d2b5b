"""Topology driver: configuration parsing, the `tandem up` commands, and a full run against
a stand-in `up` that serves the fake OpenAI server."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.cli.bench import config_from_args, register
from tandem.bench.topology import (ServingConfig, TopologyConfig, parse_configs, run_topology, runs_of, stop_group,
                                   up_command, wait_ready)
from tests.bench.fake_server import free_port


def test_parse_configs():
    assert parse_configs("colocated:2, pd:1:3") == (
        ServingConfig("colocated-2", ("--colocated", "2"), 2),
        ServingConfig("pd-1-3", ("--prefill", "1", "--decode", "3"), 4))
    for bad in ("colocated", "pd:1", "mesh:2", "colocated:x", ""):
        with pytest.raises(ValueError):
            parse_configs(bad)


def test_policies_apply_only_to_multi_worker_configurations():
    cfg = TopologyConfig(model="m", configs=parse_configs("colocated:1,pd:1:1"), policies=("rr", "pa"))
    assert [label for label, _, _ in runs_of(cfg)] == ["colocated-1", "pd-1-1-rr", "pd-1-1-pa"]
    _, sc, policy = runs_of(cfg)[1]
    cmd = up_command(replace_launcher(cfg), sc, policy)
    assert cmd == ["L", "up", "--model", "m", "--prefill", "1", "--decode", "1", "--port", "8100",
                   "--policy", "rr"]


def replace_launcher(cfg):
    from dataclasses import replace
    return replace(cfg, launcher=("L",))


def test_run_topology_against_a_stand_in_up(tmp_path, monkeypatch):
    log = tmp_path / "up.jsonl"
    monkeypatch.setenv("FAKE_UP_LOG", str(log))
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 0, "input_length": 512, "output_length": 3,
                                         "hash_ids": [i]}) + "\n" for i in range(3)))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", "topology", "--model", "m", "--configs", "colocated:1,pd:1:1",
                              "--policies", "round_robin", "--worker-threads", "1", "--trace", str(trace),
                              "--vocab-range", "5:100", "--no-progress", "--no-plots"])
    port = free_port()
    cfg = TopologyConfig(model="m", configs=parse_configs(args.configs), policies=("round_robin",),
                         port=port, ready_timeout_s=60, out_dir=str(tmp_path / "topo"),
                         tandem_args=("--worker-arg=--threads=1",),
                         launcher=(sys.executable, str(Path(__file__).with_name("fake_up.py"))))
    text = run_topology(cfg, lambda url: config_from_args(args, url=url))
    assert "| metric | better | colocated-1 | pd-1-1-round_robin |" in text
    assert (tmp_path / "topo" / "compare.md").read_text() == text
    for label in ("colocated-1", "pd-1-1-round_robin"):
        assert (tmp_path / "topo" / label / f"{label}.json").exists()
    starts = [json.loads(line) for line in log.read_text().splitlines()]
    assert starts[0] == ["up", "--model", "m", "--colocated", "1", "--port", str(port),
                         "--worker-arg=--threads=1"]
    assert starts[1][-3:] == ["--policy", "round_robin", "--worker-arg=--threads=1"]


def test_a_cluster_is_ready_when_up_says_so_not_when_its_gateway_first_answers(tmp_path, monkeypatch):
    # a gateway answers /health (and completions) once one worker is healthy; the workload waits
    # for `tandem up`'s own ready line, which comes once every worker is
    monkeypatch.setenv("FAKE_UP_LOG", str(tmp_path / "up.jsonl"))
    fake = [sys.executable, str(Path(__file__).with_name("fake_up.py"))]
    for never_ready in (True, False):
        port, log = free_port(), tmp_path / f"up-{never_ready}.log"
        env = {**os.environ, **({"FAKE_UP_NEVER_READY": "1"} if never_ready else {})}
        with open(log, "wb") as out:
            proc = subprocess.Popen([*fake, "up", "--model", "m", "--port", str(port)], stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            if never_ready:
                with pytest.raises(TimeoutError):
                    wait_ready(f"http://127.0.0.1:{port}", proc, 4.0, log)
            else:
                wait_ready(f"http://127.0.0.1:{port}", proc, 30.0, log)
        finally:
            stop_group(proc, 10.0)
