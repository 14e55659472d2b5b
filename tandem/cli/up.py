"""`tandem up`.

  tandem up --model PATH [--prefill P --decode D | --colocated N] [--profile NAME] [--port 8000] [--kv-store auto|URL]
           [--gateways N]
           [--slo-ttft-ms MS --slo-itl-ms MS] [--served-model-name NAME] [--chat-template FILE]
           [--tool-call-parser NAME] [--reasoning-parser NAME] [--cluster-secret-file FILE]
           [--queue-db [FILE] | --queue-url URL | --no-queue] [--queue-... ] [--accounts]
           [--rate-limits FILE] [--rate-limit NAME=VALUE ...] [--pricing FILE] [--no-usage-ledger]
           [--otlp-endpoint URL]
           [--shared-prefixes FILE]
      a local cluster: the gateway and P + D (or N) workers as child processes, each worker
      pinned to its share of the cores; one Ctrl-C stops them all. Once the cluster is ready, a
      child that dies is restarted with backoff (tandem/launcher/supervisor.py). The gateway
      serves the asynchronous batch API (the queue flags go to it, and the usage flags: rate
      limits, prices, the ledger, and --shared-prefixes); workers run with --no-queue.
      The model name, chat template and output parsers go to the gateway (which renders prompts)
      and to every worker alike. The cluster secret (/internal routes) is generated for each run,
      or taken from --cluster-secret[-file] / TANDEM_CLUSTER_SECRET, and reaches the children in
      their environment (tandem/launcher/cluster.py). --otlp-endpoint goes to the gateway and
      every worker, each exporting its spans under its own service name (docs/tracing.md).
      --gateways N: N gateways behind one address (a TCP balancer in tandem up that sends a
      request again to another gateway when its own died before answering;
      tandem/launcher/balancer.py), sharing one queue database.
"""

from __future__ import annotations

import argparse
import sys

from tandem.cli.queue_flags import DEFAULT, add_queue_arguments, forwarded_queue_args, state_dir
from tandem.cli.secret_flags import add_cluster_secret_arguments, cluster_secret_from_args
from tandem.cli.shared_prefix_flags import (
    add_shared_prefix_argument,
    forwarded_shared_prefix_args,
    shared_prefixes_from_args,
)
from tandem.cli.tracing_flags import add_tracing_arguments, forwarded_tracing_args, tracing_config_from_args
from tandem.cli.usage_flags import add_usage_arguments, forwarded_usage_args, usage_config_from_args
from tandem.launcher.cluster import ClusterSpec, run_cluster
from tandem.launcher.profiles import PROFILES, apply_profile
from tandem.router.policies import POLICY_NAMES
from tandem.tokenization.chat_template_arg import chat_template_arg, chat_template_flag
from tandem.turn.parser_setup import parser_flag_args, reasoning_parser_arg, tool_parser_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    u = subparsers.add_parser("up", help="a local cluster: gateway + workers as child processes")
    u.add_argument("--model", required=True, metavar="PATH")
    u.add_argument("--prefill", type=int, default=None, metavar="P", help="prefill workers")
    u.add_argument("--decode", type=int, default=None, metavar="D", help="decode workers")
    u.add_argument("--colocated", type=int, default=None, metavar="N", help="role=both workers")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=8000, help="the gateway's port")
    u.add_argument("--gateways", type=int, default=1, metavar="N",
                   help="N > 1: N gateways behind a balancer on --port, so that one that dies costs "
                        "no request (tandem/launcher/balancer.py); they share one queue database")
    u.add_argument("--policy", default="default", choices=POLICY_NAMES)
    u.add_argument("--worker-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for every `tandem serve` (repeatable), e.g. --worker-arg=--dtype=float32")
    u.add_argument("--gateway-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `tandem gateway` (repeatable), e.g. --gateway-arg=--local-prefill-tokens=256")
    u.add_argument("--tool-call-parser", type=tool_parser_arg, default=None, metavar="NAME",
                   help="for the gateway and every worker (default: recognized from the chat template)")
    u.add_argument("--reasoning-parser", type=reasoning_parser_arg, default=None, metavar="NAME",
                   help="for the gateway and every worker (default: none)")
    u.add_argument("--served-model-name", default=None, metavar="NAME",
                   help="for the gateway and every worker (default: the model directory's name)")
    u.add_argument("--chat-template", default=None, metavar="FILE|TEMPLATE",
                   help="for the gateway and every worker: a Jinja chat template in place of the model's own")
    u.add_argument("--kv-store", default=None, metavar="auto|mooncake://HOST:PORT",
                   help="Mooncake Store shared by every worker's KV tiers: auto starts a mooncake_master "
                        "on 127.0.0.1 (and stops it); a URL uses a running one")
    u.add_argument("--profile", default=None, choices=sorted(PROFILES),
                   help="hardware profile: the prefill:decode split and, per role, chunk and batch limits "
                        "and the parallel layout for a traffic shape (tandem/launcher/profiles.py)")
    u.add_argument("--slo-ttft-ms", type=float, default=None, metavar="MS",
                   help="the gateway planner's p90 time-to-first-token target; with --slo-itl-ms, "
                        "workers are moved between the prefill and decode pools at runtime (drained, "
                        "restarted in their new role)")
    u.add_argument("--slo-itl-ms", type=float, default=None, metavar="MS",
                   help="the gateway planner's p90 inter-token latency target")
    u.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F",
                   help="on a GPU: the share of its memory the workers use together, each worker "
                        "F / (number of workers) (they share the GPU; a --worker-arg wins)")
    u.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    u.add_argument("--log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug"))
    add_cluster_secret_arguments(u)   # default: a new random secret for each run
    add_queue_arguments(u)   # for the gateway
    u.add_argument("--accounts", action="store_true",
                   help="the gateway authenticates account tokens too (tandem accounts --port PORT; "
                        "the admin API /admin/*), kept in its queue's database")
    add_usage_arguments(u)   # for the gateway
    add_tracing_arguments(u)   # --otlp-endpoint for the gateway and every worker
    add_shared_prefix_argument(u)   # for the gateway, whose declaration its workers keep
    u.set_defaults(func=up)


def up(args: argparse.Namespace) -> int:
    if args.colocated is not None and (args.prefill is not None or args.decode is not None):
        print("tandem up: use either --prefill/--decode or --colocated", file=sys.stderr)
        return 2
    role_args = apply_profile(args)
    if args.kv_store and not any(a.startswith("--tensor-parallel-size") for a in args.worker_arg):
        split = sorted(role for role, flags in role_args.items()
                       if any(f.startswith("--tensor-parallel-size=") and not f.endswith("=1") for f in flags))
        if split:
            print(f"tandem up: profile {args.profile} runs {' and '.join(split)} workers over several "
                  "ranks, which cannot use KV store tiers yet: drop --kv-store, or add "
                  "--worker-arg=--tensor-parallel-size=1", file=sys.stderr)
            return 2
    usage_config_from_args(args, not args.no_queue)   # its files' errors, before anything starts
    tracing_config_from_args(args, "tandem", "up")     # a bad endpoint, before anything starts
    if args.otlp_service_name:
        print("tandem up: --otlp-service-name would name every process alike; each keeps its own "
              "(tandem-gateway, tandem-prefill, tandem-decode), or pass it per process with "
              "--worker-arg / --gateway-arg", file=sys.stderr)
        return 2
    shared_prefixes_from_args(args)
    if args.colocated is None and args.prefill is None and args.decode is None:
        args.prefill, args.decode = 1, 1
    if args.colocated is None and not (args.prefill and args.decode):
        print("tandem up: --prefill and --decode both need at least 1", file=sys.stderr)
        return 2
    if args.gateways < 1:
        print("tandem up: --gateways needs at least 1", file=sys.stderr)
        return 2
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        print("tandem up: --gpu-memory-utilization must be in (0, 1]", file=sys.stderr)
        return 2
    if args.chat_template is not None:
        try:
            chat_template_arg(args.chat_template)
        except argparse.ArgumentTypeError as exc:
            print(f"tandem up: {exc}", file=sys.stderr)
            return 2
    parsers = parser_flag_args(args.tool_call_parser, args.reasoning_parser) + chat_template_flag(args.chat_template) \
        + ((f"--served-model-name={args.served_model_name}",) if args.served_model_name else ())
    workers = (args.prefill or 0) + (args.decode or 0) + (args.colocated or 0)
    share = (f"--gpu-memory-utilization={args.gpu_memory_utilization / workers:.4g}",)
    spec = ClusterSpec(model=args.model, prefill=args.prefill or 0, decode=args.decode or 0,
                       colocated=args.colocated or 0, host=args.host, port=args.port,
                       policy=args.policy,
                       worker_args=share + forwarded_tracing_args(args) + tuple(args.worker_arg) + parsers,
                       role_args=role_args,
                       gateway_args=slo_args(args) + tuple(args.gateway_arg) + parsers
                       + shared_queue_args(args) + (("--accounts",) if args.accounts else ())
                       + forwarded_usage_args(args) + forwarded_tracing_args(args)
                       + forwarded_shared_prefix_args(args),
                       ready_timeout_s=args.ready_timeout, log_level=args.log_level,
                       kv_store=args.kv_store, cluster_secret=cluster_secret_from_args(args, "up"),
                       gateways=args.gateways)
    return run_cluster(spec)


def slo_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The planner's targets for the gateway (before --gateway-arg's, which win)."""
    out: tuple[str, ...] = ()
    if args.slo_ttft_ms is not None:
        out += (f"--slo-ttft-ms={args.slo_ttft_ms:g}",)
    if args.slo_itl_ms is not None:
        out += (f"--slo-itl-ms={args.slo_itl_ms:g}",)
    return out


def shared_queue_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The gateways' queue flags. Several gateways listen on ports of their own, so the default
    queue file (named after a gateway's port) is named here after --port: they share it (and
    `tandem accounts --port` finds it)."""
    out = forwarded_queue_args(args)
    if args.gateways > 1 and not args.no_queue and args.queue_url is None and (
            args.queue_db is None or args.queue_db == DEFAULT):
        out = tuple(a for a in out if a != "--queue-db") + (
            "--queue-db", str(state_dir() / f"queue-{args.port}.db"))
    return out
