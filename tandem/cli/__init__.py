"""`tandem` command line: one verb per component, each registered by its own cli module.

The cli modules are the only place that reads flags and the environment; they build the
frozen configs and hand them down.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tandem.cli.cpu_threads import set_wait_policy

# verb -> the module exposing `register(subparsers)`, which adds its verbs and sets
# `func(args) -> int`. Only the module of the verb being run is imported (some import torch,
# which a gateway does not need); `tandem --help` imports them all.
VERB_MODULES = {
    "serve": "tandem.cli.serve",
    "gateway": "tandem.cli.gateway",
    "up": "tandem.cli.up",
    "bench": "tandem.cli.bench",
    "model": "tandem.cli.model",
    "sim": "tandem.cli.sim",
}


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tandem", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="verb", required=True)
    names = [VERB_MODULES[verb]] if verb in VERB_MODULES else list(dict.fromkeys(VERB_MODULES.values()))
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    set_wait_policy(os.environ)   # before a verb's module loads torch and its OpenMP runtime
    verb = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(verb).parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
