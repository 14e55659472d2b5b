"""The structured-output bounds of `tandem serve`, and the one place they become a GrammarConfig.

  --max-grammar-chars N        a constraint's text (schema, regex, grammar, structural tag with the
                               tools, choices) above N characters: 400 (default 262144)
  --max-grammar-choices N      a guided_choice of more than N options: 400 (default 1000)
  --grammar-compile-timeout S  a compile running longer is killed: 400 (default 10, or
                               $TANDEM_GRAMMAR_COMPILE_TIMEOUT; 0: compile in the worker's own
                               process, with no limit and nothing to kill, and no helper process)
"""

from __future__ import annotations

import argparse
import os

from tandem.config import GrammarConfig

COMPILE_TIMEOUT_ENV = "TANDEM_GRAMMAR_COMPILE_TIMEOUT"


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds: {text}")
    return value


def add_grammar_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("structured outputs' bounds (each exceeded is a 400 naming it)")
    g.add_argument("--max-grammar-chars", type=_positive_int, default=GrammarConfig.max_chars, metavar="N",
                   help="the largest constraint text in characters: a JSON schema, regex, grammar, "
                        "the tools' structural tag, a choice list")
    g.add_argument("--max-grammar-choices", type=_positive_int, default=GrammarConfig.max_choices,
                   metavar="N", help="the most options of guided_choice (compile time grows "
                                     "faster than their square)")
    # the environment's default lets a test suite start every server with in-process compiles
    # (each helper process imports torch and xgrammar: ~4 s of CPU at every worker start)
    default_timeout = os.environ.get(COMPILE_TIMEOUT_ENV)
    g.add_argument("--grammar-compile-timeout", type=_seconds,
                   default=GrammarConfig.compile_timeout_s if default_timeout is None else _seconds(default_timeout),
                   metavar="SECONDS", help="a constraint's compile is killed after this long (compiles "
                                           "run one at a time in a low-priority child process); 0: "
                                           "in the worker's process, unbounded")


def grammar_config_from_args(args: argparse.Namespace) -> GrammarConfig:
    return GrammarConfig(max_chars=args.max_grammar_chars, max_choices=args.max_grammar_choices,
                         compile_timeout_s=args.grammar_compile_timeout or None)
