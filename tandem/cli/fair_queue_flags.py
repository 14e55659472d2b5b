"""The gateway's flow control on the command line (tandem/gateway/admission/), and the one place
its flags become a FairQueueConfig.

  --no-fair-queue                 requests over capacity get 429 at once (no waiting)
  --fair-queue-max-requests N     waiting requests per tenant before 429 (default 256)
  --fair-queue-max-tokens N       waiting tokens per tenant before 429 (default: no bound)
  --fair-queue-max-wait S         a request waiting longer gets 503 (default 60)
  --fair-queue-aging S            one priority level better per S seconds waited (default 5)
  --fair-queue-output-estimate N  max_tokens counts at most N toward a request's cost (512)
  --tenant-weight TENANT=W        a tenant's share of the tokens (repeatable; others: 1)
  --max-inflight-tokens-per-worker N   a worker with N estimated tokens (prompts still to
                                  compute plus active contexts) is at capacity (default: no bound)
A malformed or non-positive value is a usage error naming the flag.
"""

from __future__ import annotations

import argparse

from tandem.gateway.admission.fair_queue import FairQueueConfig

_D = FairQueueConfig()


def add_fair_queue_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-fair-queue", action="store_true",
                   help="requests that find every worker at capacity get 429 at once instead of "
                        "waiting at the gateway in per-tenant fair queues")
    p.add_argument("--fair-queue-max-requests", type=int, default=_D.max_requests, metavar="N",
                   help="requests of one tenant that may wait at the gateway; the next gets 429 "
                        "with Retry-After")
    p.add_argument("--fair-queue-max-tokens", type=int, default=None, metavar="N",
                   help="tokens (prompt + capped max_tokens) of one tenant that may wait; default "
                        "no bound")
    p.add_argument("--fair-queue-max-wait", type=float, default=_D.max_wait_s, metavar="S",
                   help="a request that waited this long at the gateway gets 503")
    p.add_argument("--fair-queue-aging", type=float, default=_D.aging_s, metavar="S",
                   help="starvation bound across one tenant's priorities: a waiting request counts one "
                        "priority level better per S seconds waited")
    p.add_argument("--fair-queue-output-estimate", type=int, default=_D.output_estimate, metavar="N",
                   help="a request's cost in the fair queue is its prompt tokens plus max_tokens, "
                        "counted at most N")
    p.add_argument("--tenant-weight", action="append", default=[], metavar="TENANT=W",
                   help="a tenant's weight in the fair queue (key-<i> for the i-th --api-key, an "
                        "account's id); repeatable; others weigh 1")
    p.add_argument("--max-inflight-tokens-per-worker", type=int, default=None, metavar="N",
                   help="a worker with N estimated tokens in flight (prompts to compute plus active "
                        "contexts) is at capacity; default: only --max-in-flight and --max-waiting")


def _weights(values: list[str]) -> tuple[tuple[str, float], ...]:
    out = []
    for v in values:
        tenant, sep, w = v.rpartition("=")
        try:
            weight = float(w)
        except ValueError:
            weight = float("nan")
        if not sep or not tenant or not weight > 0:
            raise SystemExit(f"--tenant-weight {v!r}: expected TENANT=W with W a positive number, "
                             f"e.g. key-0=2")
        out.append((tenant, weight))
    return tuple(out)


def fair_queue_config_from_args(args: argparse.Namespace) -> FairQueueConfig:
    if args.max_inflight_tokens_per_worker is not None and args.max_inflight_tokens_per_worker < 1:
        raise SystemExit("--max-inflight-tokens-per-worker must be at least 1")
    try:
        return FairQueueConfig(enabled=not args.no_fair_queue,
                               max_requests=args.fair_queue_max_requests,
                               max_tokens=args.fair_queue_max_tokens,
                               max_wait_s=args.fair_queue_max_wait, aging_s=args.fair_queue_aging,
                               output_estimate=args.fair_queue_output_estimate,
                               weights=_weights(args.tenant_weight))
    except ValueError as exc:
        raise SystemExit(f"fair queue flags: {exc}") from None
