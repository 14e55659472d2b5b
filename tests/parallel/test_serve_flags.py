"""`tandem serve` takes vLLM's parallel flags; one rank (the default) starts no parallel worker."""

from __future__ import annotations

import argparse

from tandem.cli import serve as cli


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["serve", "--model", "m", *argv])


def test_flags_parse_and_default_to_one_process():
    args = _parse()
    assert (args.tensor_parallel_size, args.pipeline_parallel_size, args.enable_expert_parallel) == (1, 1, False)
    assert cli._parallel_engine(args, None) is None
    args = _parse("--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--enable-expert-parallel")
    assert (args.tensor_parallel_size, args.pipeline_parallel_size, args.enable_expert_parallel) == (2, 2, True)
