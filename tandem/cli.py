"""`tandem` command line: one verb per component, each registered by its own cli module.

The cli modules are the only place that reads flags and the environment; they build the
frozen configs and hand them down.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules exposing `register(subparsers)`; each adds its verbs and sets `func(args) -> int`.
VERB_MODULES = (
    "tandem.server.cli",    # serve
    "tandem.gateway.cli",   # gateway, up
    "tandem.bench.cli",     # bench
    "tandem.models.cli",    # model
    "tandem.demo.cli",      # demo
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tandem", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="verb", required=True)
    for name in VERB_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
