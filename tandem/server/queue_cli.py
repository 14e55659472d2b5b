"""The queue's command-line flags, shared by `tandem serve` and `tandem gateway`, and the one
place they become a QueueConfig.

  --queue-db [FILE]     SQLite file (WAL); without FILE: $XDG_STATE_HOME/tandem/queue-<port>.db
                        (~/.local/state/... when unset)
  --queue-url URL       redis://HOST:PORT[/DB] or postgresql://USER@HOST:PORT/DB, shared by
                        several gateways
  --queue-concurrency N, --queue-lease S, --queue-headroom-tokens N
Without --queue-db or --queue-url the server has no queue (queueRequest and /v1/batches 400/404).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tandem.server.queue_service import QueueConfig

DEFAULT = "default"


def add_queue_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queue-db", nargs="?", const=DEFAULT, default=None, metavar="FILE",
                   help="serve the asynchronous batch API from this SQLite file (WAL); without "
                        "FILE: queue-<port>.db under $XDG_STATE_HOME/tandem")
    p.add_argument("--queue-url", default=None, metavar="URL",
                   help="the queue on redis://... or postgresql://..., shared by several gateways")
    p.add_argument("--queue-concurrency", type=int, default=QueueConfig.max_concurrency,
                   help="queued requests running at once from this server")
    p.add_argument("--queue-lease", type=float, default=QueueConfig.lease_s, metavar="SECONDS",
                   help="a crashed server's queued requests run elsewhere after this")
    p.add_argument("--queue-headroom-tokens", type=int, default=QueueConfig.headroom_prefill_tokens,
                   metavar="N", help="queued work is taken only while some worker has at most N "
                                     "prompt tokens waiting to be computed")


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "tandem"


def queue_config_from_args(args: argparse.Namespace, port: int) -> QueueConfig | None:
    if args.queue_db is not None and args.queue_url is not None:
        raise SystemExit("give --queue-db or --queue-url, not both")
    target = args.queue_url or args.queue_db
    if target is None:
        return None
    if target == DEFAULT:
        target = str(state_dir() / f"queue-{port}.db")
    return QueueConfig(target=target, max_concurrency=args.queue_concurrency,
                       lease_s=args.queue_lease, headroom_prefill_tokens=args.queue_headroom_tokens)
