"""`tandem up --profile NAME`: the preset fills the worker split and flags; explicit ones win."""

from __future__ import annotations

import argparse

import pytest

from tandem.launcher import cli
from tandem.launcher.profiles import PROFILES


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["up", "--model", "m", *argv])


def test_input_heavy_has_more_prefill_and_bigger_chunks(monkeypatch):
    seen = {}
    monkeypatch.setattr("tandem.launcher.cluster.run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    args = _parse("--profile", "input-heavy", "--worker-arg=--max-num-seqs=8")
    cli.up(args)
    spec = seen["spec"]
    assert (spec.prefill, spec.decode) == (2, 1)
    assert spec.worker_args[:3] == ("--max-num-batched-tokens=2048", "--max-num-seqs=32",
                                    "--long-prefill-token-threshold=512")
    assert spec.worker_args.index("--max-num-seqs=8") > spec.worker_args.index("--max-num-seqs=32")  # last wins


def test_output_heavy_favours_decode_and_explicit_split_wins(monkeypatch):
    seen = {}
    monkeypatch.setattr("tandem.launcher.cluster.run_cluster", lambda spec: seen.setdefault("spec", spec) and 0)
    cli.up(_parse("--profile", "output-heavy"))
    assert (seen["spec"].prefill, seen["spec"].decode) == (1, 2)
    seen.clear()
    cli.up(_parse("--profile", "output-heavy", "--colocated", "1"))
    assert (seen["spec"].colocated, seen["spec"].prefill) == (1, 0)
    assert "--max-num-seqs=128" in seen["spec"].worker_args


def test_profile_flags_are_valid_serve_flags():
    from tandem.server import cli as serve_cli

    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    for p in PROFILES.values():
        args = parser.parse_args(["serve", "--model", "m", *p.worker_args()])
        assert args.max_num_seqs == p.max_num_seqs
    with pytest.raises(SystemExit):
        _parse("--profile", "no-such-profile")
