"""Rate limits, prices and the usage ledger on the command line, shared by `tandem serve`,
`tandem gateway` and `tandem up` (which forwards them to its gateway), and the one place they
become a UsageConfig.

  --rate-limits FILE       per account and model, interactive and batch (tandem/usage/limits.py)
  --rate-limit NAME=VALUE  the default rule's limits, over the file's (repeatable), e.g.
                           requests_per_minute=60, batch.output_tokens_per_minute=100000,
                           reserve_output_tokens=128
  --pricing FILE           USD per million tokens by model (tandem/usage/pricing.py)
  --no-usage-ledger        record nothing (rate limits still apply)
All of them live in the queue's database: with --no-queue, --rate-limits, --rate-limit and
--pricing are usage errors. A file that does not parse, or a limit of zero or below, is a usage
error naming the problem.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tandem.usage.limits import RateLimits, parse_rate_limits, with_default_settings
from tandem.usage.meter import UsageConfig
from tandem.usage.pricing import PriceTable, parse_pricing


def add_usage_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate-limits", default=None, metavar="FILE",
                   help="rate limits per account and model, JSON (requests, input and output tokens "
                        "per minute; queued work apart); shared by every gateway on the queue's database")
    p.add_argument("--rate-limit", action="append", default=[], metavar="NAME=VALUE",
                   help="a limit of the default rule, e.g. requests_per_minute=60 or "
                        "batch.input_tokens_per_minute=500000 (repeatable; over --rate-limits)")
    p.add_argument("--pricing", default=None, metavar="FILE",
                   help="prices per model, USD per million tokens (input, cached_input, output), JSON")
    p.add_argument("--no-usage-ledger", action="store_true",
                   help="do not record requests in the usage ledger")


def _read(flag: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise SystemExit(f"{flag} {path}: {exc.strerror or exc}") from None


def usage_config_from_args(args: argparse.Namespace, has_queue: bool) -> UsageConfig:
    limits: RateLimits | None = None
    prices: PriceTable | None = None
    try:
        if args.rate_limits is not None:
            limits = parse_rate_limits(_read("--rate-limits", args.rate_limits),
                                       f"--rate-limits {args.rate_limits}")
        if args.rate_limit:
            limits = with_default_settings(limits or RateLimits(), args.rate_limit)
        if args.pricing is not None:
            prices = parse_pricing(_read("--pricing", args.pricing), f"--pricing {args.pricing}")
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if not has_queue and (limits is not None or prices is not None):
        raise SystemExit("--rate-limits, --rate-limit and --pricing keep their counts in the "
                         "queue's database: drop --no-queue (or name one with --queue-db/--queue-url)")
    return UsageConfig(limits=limits, prices=prices, ledger=not args.no_usage_ledger)


def forwarded_usage_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The usage flags given to `tandem up`, as arguments for its `tandem gateway` (files as
    absolute paths: the gateway may start elsewhere)."""
    out: list[str] = []
    if args.rate_limits is not None:
        out += ["--rate-limits", str(Path(args.rate_limits).resolve())]
    for setting in args.rate_limit:
        out += ["--rate-limit", setting]
    if args.pricing is not None:
        out += ["--pricing", str(Path(args.pricing).resolve())]
    if args.no_usage_ledger:
        out.append("--no-usage-ledger")
    return tuple(out)
