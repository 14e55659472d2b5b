"""`tandem up --profile NAME`: the preset fills the worker split and each role's flags (parallel
layout included); explicit ones win; a role switch takes the new role's flags."""

from __future__ import annotations

import argparse

import pytest

from tandem.cli import up as cli
from tandem.launcher.cluster import as_role, plan
from tandem.launcher.profiles import PROFILES


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["up", "--model", "m", *argv])


def _spec(monkeypatch, *argv: str):
    seen = {}
    monkeypatch.setattr("tandem.cli.up.run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    cli.up(_parse(*argv))
    return seen["spec"]


def test_input_heavy_has_more_prefill_with_bigger_chunks_over_two_ranks(monkeypatch):
    spec = _spec(monkeypatch, "--profile", "input-heavy", "--worker-arg=--max-num-seqs=8")
    assert (spec.prefill, spec.decode) == (2, 1)
    assert spec.role_args["prefill"] == ("--max-num-batched-tokens=2048", "--max-num-seqs=32",
                                         "--long-prefill-token-threshold=512", "--tensor-parallel-size=2")
    assert "--tensor-parallel-size=2" not in spec.role_args["decode"]
    procs = plan(spec)
    prefill, decode = procs[0].cmd, procs[2].cmd
    assert "--tensor-parallel-size=2" in prefill and "--tensor-parallel-size=2" not in decode
    for cmd in (prefill, decode):   # the explicit flag comes last: it wins
        assert cmd.index("--max-num-seqs=8") > max(i for i, a in enumerate(cmd)
                                                   if a.startswith("--max-num-seqs=") and a != "--max-num-seqs=8")


def test_output_heavy_favours_decode_and_explicit_split_wins(monkeypatch):
    spec = _spec(monkeypatch, "--profile", "output-heavy")
    assert (spec.prefill, spec.decode) == (1, 2)
    assert "--tensor-parallel-size=2" in spec.role_args["decode"]
    spec = _spec(monkeypatch, "--profile", "output-heavy", "--colocated", "1")
    assert (spec.colocated, spec.prefill) == (1, 0)
    (worker, _gateway) = plan(spec)
    assert "--max-num-seqs=128" in worker.cmd    # a colocated worker takes the decode settings


def test_a_role_switch_takes_the_new_roles_arguments(monkeypatch):
    spec = _spec(monkeypatch, "--profile", "input-heavy", "--worker-arg=--dtype=float32")
    prefill = plan(spec)[0]
    decode = as_role(spec, prefill, "decode")
    assert (decode.name, decode.url, decode.cores, decode.role) == (prefill.name, prefill.url,
                                                                  prefill.cores, "decode")
    assert decode.cmd[decode.cmd.index("--role") + 1] == "decode"
    assert "--tensor-parallel-size=2" not in decode.cmd and "--max-num-seqs=64" in decode.cmd
    assert "--dtype=float32" in decode.cmd


def test_profile_flags_are_valid_serve_flags():
    from tandem.cli import serve as serve_cli

    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    for p in PROFILES.values():
        for settings in (p.prefill_worker, p.decode_worker):
            args = parser.parse_args(["serve", "--model", "m", *settings.serve_args()])
            assert args.max_num_seqs == settings.max_num_seqs
            assert args.tensor_parallel_size == settings.tensor_parallel_size
    with pytest.raises(SystemExit):
        _parse("--profile", "no-such-profile")


def test_a_profile_over_several_ranks_with_a_kv_store_is_refused_unless_overridden(monkeypatch, capsys):
    assert cli.up(_parse("--profile", "input-heavy", "--kv-store", "auto")) == 2
    assert "--tensor-parallel-size=1" in capsys.readouterr().err
    spec = _spec(monkeypatch, "--profile", "input-heavy", "--kv-store", "auto",
                 "--worker-arg=--tensor-parallel-size=1")
    assert spec.kv_store == "auto" and plan(spec)[0].cmd[-1] == "--tensor-parallel-size=1"
