"""The queue's command-line flags, shared by `tandem serve`, `tandem gateway` and `tandem up`,
and the one place they become a QueueConfig.

  --queue-db FILE       SQLite file (WAL); default: $XDG_STATE_HOME/tandem/queue-<port>.db
                        (~/.local/state/... when unset)
  --queue-url URL       redis://HOST:PORT[/DB] or postgresql://USER@HOST:PORT/DB, shared by
                        several gateways
  --no-queue            no queue: queueRequest answers 400, /v1/files and /v1/batches 404
  --queue-concurrency N, --queue-lease S, --queue-headroom-tokens N,
  --queue-interactive-limit N, --queue-prefill-concurrency N, --event-url-allow PREFIX (repeatable)
  --max-file-bytes SIZE the largest /v1/files upload (default 100MiB; 413 beyond)
The queue is on by default for `tandem gateway` and a standalone `tandem serve` (its own
gateway); a worker under a gateway (`tandem serve --gateway URL`, or role prefill/decode) has
none unless --queue-db or --queue-url names one. `tandem up` gives its gateway the queue
(forwarding these flags) and its workers --no-queue.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tandem.api.queue.service import QueueConfig
from tandem.cli.arg_types import parse_bytes

DEFAULT = "default"


def add_queue_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queue-db", nargs="?", const=DEFAULT, default=None, metavar="FILE",
                   help="serve the asynchronous batch API from this SQLite file (WAL); default: "
                        "queue-<port>.db under $XDG_STATE_HOME/tandem")
    p.add_argument("--queue-url", default=None, metavar="URL",
                   help="the queue on redis://... or postgresql://..., shared by several gateways")
    p.add_argument("--no-queue", action="store_true",
                   help="serve no asynchronous batch API (queueRequest, /v1/files, /v1/batches)")
    p.add_argument("--queue-concurrency", type=int, default=QueueConfig.max_concurrency,
                   help="queued requests running at once from this server")
    p.add_argument("--queue-lease", type=float, default=QueueConfig.lease_s, metavar="SECONDS",
                   help="a crashed server's queued requests run elsewhere after this")
    p.add_argument("--queue-headroom-tokens", type=int, default=QueueConfig.headroom_prefill_tokens,
                   metavar="N", help="queued work is taken only while some worker has at most N "
                                     "prompt tokens waiting to be computed")
    p.add_argument("--queue-prefill-concurrency", type=int, default=QueueConfig.prefill_concurrency,
                   metavar="N", help="queued requests computing their prompts at once (default 1: "
                                     "the next starts once one has its first token)")
    p.add_argument("--queue-interactive-limit", type=int, default=QueueConfig.interactive_limit,
                   metavar="N", help="queued work runs only while at most N interactive requests "
                                     "are in flight here; beyond N it is preempted back to the "
                                     "queue (default 0: only while none is)")
    p.add_argument("--max-file-bytes", type=parse_bytes, default=QueueConfig.max_file_bytes,
                   metavar="SIZE", help="the largest file /v1/files accepts (default 100MiB: a batch "
                        "input file is held whole in memory while its batch is created); larger "
                        "uploads get 413 as soon as they pass it")
    p.add_argument("--event-url-allow", action="append", default=[], metavar="PREFIX",
                   help="event subscriptions may only name URLs starting with PREFIX, e.g. "
                        "https://hooks.example.com/ (repeatable; default: any http(s) URL)")


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "tandem"


def url_prefix(text: str) -> str:
    """'https://h.example.com' -> 'https://h.example.com/': a bare origin must not also allow
    https://h.example.com.evil.net."""
    if not text.startswith(("http://", "https://")):
        raise SystemExit(f"--event-url-allow {text!r}: give an http(s) URL prefix")
    return text if "/" in text.split("://", 1)[1] else text + "/"


def queue_config_from_args(args: argparse.Namespace, port: int,
                           default_on: bool = True) -> QueueConfig | None:
    """None: no queue (--no-queue, or none named where the default is off)."""
    if args.queue_db is not None and args.queue_url is not None:
        raise SystemExit("give --queue-db or --queue-url, not both")
    target = args.queue_url or args.queue_db
    if args.no_queue:
        if target is not None:
            raise SystemExit("--no-queue turns the queue off: drop --queue-db/--queue-url")
        return None
    if target is None:
        if not default_on:
            return None
        target = DEFAULT
    if target == DEFAULT:
        target = str(state_dir() / f"queue-{port}.db")
    return QueueConfig(target=target, max_concurrency=args.queue_concurrency,
                       lease_s=args.queue_lease, headroom_prefill_tokens=args.queue_headroom_tokens,
                       interactive_limit=args.queue_interactive_limit,
                       prefill_concurrency=args.queue_prefill_concurrency,
                       max_file_bytes=args.max_file_bytes,
                       event_url_allow=tuple(url_prefix(u) for u in args.event_url_allow))


def forwarded_queue_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The queue flags given to `tandem up`, as arguments for its `tandem gateway`."""
    out: list[str] = []
    if args.no_queue:
        out.append("--no-queue")
    if args.queue_db is not None:
        out += ["--queue-db"] if args.queue_db == DEFAULT else ["--queue-db", args.queue_db]
    if args.queue_url is not None:
        out += ["--queue-url", args.queue_url]
    for flag, value, default in (
            ("--queue-concurrency", args.queue_concurrency, QueueConfig.max_concurrency),
            ("--queue-lease", args.queue_lease, QueueConfig.lease_s),
            ("--queue-headroom-tokens", args.queue_headroom_tokens, QueueConfig.headroom_prefill_tokens),
            ("--queue-interactive-limit", args.queue_interactive_limit, QueueConfig.interactive_limit),
            ("--queue-prefill-concurrency", args.queue_prefill_concurrency,
             QueueConfig.prefill_concurrency),
            ("--max-file-bytes", args.max_file_bytes, QueueConfig.max_file_bytes)):
        if value != default:
            out += [flag, str(value)]
    for prefix in args.event_url_allow:
        out += ["--event-url-allow", prefix]
    return tuple(out)
