"""The --accounts flags of `tandem serve` and `tandem gateway`, and their check at start-up.

  --accounts               account tokens (`tandem accounts`, the admin API /admin/*) authenticate
                           callers besides any --api-key; kept in the queue's database, so the
                           server needs its queue (--queue-db or --queue-url, not --no-queue)
  --token-cache-ttl S      a token revoked, or an account disabled, elsewhere (another gateway, the
                           CLI) stops working here within S seconds (default 5)
"""

from __future__ import annotations

import argparse

from tandem.api.queue.service import QueueConfig

DEFAULT_TTL_S = 5.0


def add_accounts_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accounts", action="store_true",
                   help="authenticate callers with account tokens too (tandem accounts; the admin "
                        "API /admin/*), kept in the queue's database")
    p.add_argument("--token-cache-ttl", type=float, default=DEFAULT_TTL_S, metavar="S",
                   help="with --accounts: a token revoked elsewhere stops working here within S "
                        "seconds (default 5)")


def accounts_settings(args: argparse.Namespace, queue: QueueConfig | None, verb: str) -> dict:
    """ServerConfig's / GatewayConfig's accounts fields; a usage error for --accounts without a
    queue, or a TTL that is not a positive number."""
    if args.accounts and queue is None:
        raise SystemExit(f"tandem {verb}: --accounts keeps accounts in the queue's database: give "
                         "--queue-db FILE or --queue-url URL (and no --no-queue)")
    if not args.token_cache_ttl > 0:
        raise SystemExit(f"tandem {verb}: --token-cache-ttl must be a positive number of seconds")
    return {"accounts": args.accounts, "token_cache_ttl_s": args.token_cache_ttl}
