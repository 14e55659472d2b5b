"""`tandem gateway`.

  tandem gateway [--host 127.0.0.1] [--port 8000] [--worker URL ...] [--prefill URL ...]
                 [--decode URL ...] [--policy NAME] [--model PATH] [--api-key KEY ...]
                 [--share-prefix-cache | --shared-prefixes FILE]
                 [--cluster-secret-file FILE | --cluster-secret SECRET]
                 [--queue-db [FILE] | --queue-url redis://...|postgresql://... | --no-queue]
                 [--accounts [--token-cache-ttl S]]
                 [--rate-limits FILE] [--rate-limit NAME=VALUE ...] [--pricing FILE]
                 [--no-usage-ledger] [--otlp-endpoint URL] [--otlp-service-name NAME]
      the gateway; workers may also register at runtime (tandem serve --gateway URL). It serves
      the asynchronous batch API by default, on a SQLite file under the state directory, and
      keeps rate limits and the usage ledger in the same database (tandem/cli/usage_flags.py).
"""

from __future__ import annotations

import argparse
import gc
import logging

import uvicorn

from tandem.cli.accounts_flags import accounts_settings, add_accounts_arguments
from tandem.cli.arg_types import origins
from tandem.cli.fair_queue_flags import add_fair_queue_arguments, fair_queue_config_from_args
from tandem.cli.queue_flags import add_queue_arguments, queue_config_from_args
from tandem.cli.secret_flags import (
    add_cluster_secret_arguments,
    check_distinct,
    cluster_secret_from_args,
    exposure_warning,
)
from tandem.cli.shared_prefix_flags import add_shared_prefix_argument, shared_prefixes_from_args
from tandem.cli.tracing_flags import add_tracing_arguments, tracing_config_from_args
from tandem.cli.usage_flags import add_usage_arguments, usage_config_from_args
from tandem.gateway.app import build_gateway_app, model_facts
from tandem.gateway.config import GatewayConfig, RegistryConfig
from tandem.planner.policy import PlannerConfig
from tandem.router.admission import AdmissionLimits
from tandem.router.policies import POLICY_NAMES
from tandem.router.policies.placement import PlacementConfig
from tandem.tokenization.chat_template_arg import chat_template_arg
from tandem.turn.parser_setup import add_parser_flags, parser_settings
from tandem.turn.sampling_defaults import GENERATION_CONFIG_MODES, SamplingDefaults, add_override_flag


def register(subparsers: argparse._SubParsersAction) -> None:
    g = subparsers.add_parser("gateway", help="route requests over workers (PD-aware, cache-aware)")
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, default=8000)
    g.add_argument("--worker", action="append", default=[], metavar="URL",
                   help="a worker of any role (read from its /internal/stats); repeatable")
    g.add_argument("--prefill", action="append", default=[], metavar="URL", help="a prefill worker")
    g.add_argument("--decode", action="append", default=[], metavar="URL", help="a decode worker")
    g.add_argument("--policy", default="default", choices=POLICY_NAMES,
                   help="routing policy for every pool (default: affinity, then prefix + token load)")
    g.add_argument("--prefill-policy", default=None, choices=POLICY_NAMES)
    g.add_argument("--decode-policy", default=None, choices=POLICY_NAMES)
    g.add_argument("--model", default=None, metavar="PATH",
                   help="model directory: tokenizer and chat template (to hash prompt prefixes)")
    g.add_argument("--served-model-name", default=None)
    g.add_argument("--chat-template", type=chat_template_arg, default=None, metavar="FILE|TEMPLATE",
                   help="the workers' --chat-template (prompts are rendered here as there)")
    g.add_argument("--generation-config", default="auto", choices=GENERATION_CONFIG_MODES,
                   help="auto: sampling defaults from the model's generation_config.json (as vLLM "
                        "and tandem serve); vllm: the API's own defaults")
    add_override_flag(g)
    add_parser_flags(g)   # the gateway's routes parse the output (tool calls, reasoning)
    g.add_argument("--api-key", action="append", default=[], help="accepted Bearer key (repeatable)")
    g.add_argument("--share-prefix-cache", action="store_true",
                   help="tenants (API keys) share the prefix cache: a prompt one tenant sent is a "
                        "cache hit for another (off: each tenant's KV is its own; requests may "
                        "still separate theirs with cache_salt)")
    add_shared_prefix_argument(g)
    add_cluster_secret_arguments(g)
    g.add_argument("--allowed-origins", type=origins, default="*",
                   help="comma-separated origins browsers may call from (CORS); '' for none")
    g.add_argument("--poll-interval", type=float, default=RegistryConfig.poll_interval_s,
                   help="seconds between worker polls")
    g.add_argument("--unhealthy-after", type=int, default=RegistryConfig.unhealthy_after,
                   help="polls that connect but time out or fail before a worker is unhealthy (one "
                        "that cannot connect makes it unhealthy at once)")
    g.add_argument("--probe-timeout", type=float, default=RegistryConfig.probe_timeout_s, metavar="S",
                   help="seconds a worker poll (/internal/stats) waits for its answer")
    g.add_argument("--connect-timeout", type=float, default=GatewayConfig.connect_timeout_s, metavar="S",
                   help="seconds to open a connection to a worker (calls and polls); a worker whose "
                        "poll cannot connect in time is unhealthy and its streams move elsewhere")
    g.add_argument("--worker-read-timeout", type=float, default=GatewayConfig.worker_read_timeout_s,
                   metavar="S", help="seconds a call to a worker may wait for its next output line "
                                     "before it fails and the request is retried or migrated")
    g.add_argument("--heartbeat-ttl", type=float, default=RegistryConfig.heartbeat_ttl_s, metavar="S",
                   help="a self-registered worker without a heartbeat this long is removed")
    g.add_argument("--register-probe-timeout", type=float, metavar="S",
                   default=RegistryConfig.register_probe_timeout_s,
                   help="a worker's first registration is refused unless its advertised URL's "
                        "/health answers within S seconds (0: not probed)")
    g.add_argument("--allow-loopback-workers", action="store_true",
                   help="accept workers advertising a loopback address although the gateway is not "
                        "bound to loopback (one host; refused by default)")
    g.add_argument("--max-in-flight", type=int, default=256,
                   help="requests open on one worker before it counts as saturated (when all are, "
                        "requests wait in the fair queue; 429 with --no-fair-queue); a session's own "
                        "worker takes its requests over it by a quarter more (at least one), as does "
                        "any worker for a request of a tenant below its fair share of the slots "
                        "(--no-tenant-overflow: not), and for one of a better priority than some "
                        "open there")
    g.add_argument("--tenant-overflow", action=argparse.BooleanOptionalAction, default=True,
                   help="a tenant holding fewer requests than its fair share of the slots, while "
                        "another holds more, goes over --max-in-flight by a quarter of it (default on)")
    g.add_argument("--max-waiting", type=int, default=128,
                   help="requests a worker reports waiting before it counts as saturated")
    g.add_argument("--prefill-placement", default="auto", choices=("auto", "remote"),
                   help="with prefill and decode workers: auto (default) lets the decode worker "
                        "prefill a request itself when the prefill queue would make it wait longer "
                        "than the decode worker's streams would stall (conditional disaggregation); "
                        "remote sends every request through a prefill worker")
    g.add_argument("--placement-stall-weight", type=float, default=1.0, metavar="W",
                   help="auto placement: weight of the decode streams' stall against the request's "
                        "wait (higher protects inter-token latency, lower time to first token)")
    g.add_argument("--placement-keep-prefix", action=argparse.BooleanOptionalAction, default=False,
                   help="auto placement: a request whose decode worker holds more of its prompt "
                        "than the prefill worker (a session's history) is prefilled on the decode "
                        "worker, so the session's prefix stays in one cache (default off: it costs "
                        "the decode workers' inter-token latency while they prefill later turns)")
    g.add_argument("--local-prefill-tokens", type=int, default=0, metavar="N",
                   help="with prefill and decode workers: a request with at most N prompt tokens "
                        "uncached on its decode worker is always prefilled there (default 0: "
                        "only --prefill-placement decides)")
    g.add_argument("--slo-ttft-ms", type=float, default=None, metavar="MS",
                   help="planner target: p90 time to first token; with --slo-itl-ms, the planner "
                        "moves workers between the prefill and decode pools (GET /internal/planner; "
                        "the gateway switches self-registered workers, tandem up restarts its own)")
    g.add_argument("--slo-itl-ms", type=float, default=None, metavar="MS",
                   help="planner target: p90 inter-token latency")
    g.add_argument("--planner-interval", type=float, default=10.0, metavar="S",
                   help="seconds per planning round (the p90s are measured over one round)")
    g.add_argument("--planner-cooldown", type=float, default=60.0, metavar="S",
                   help="no role switch this soon after the previous one")
    g.add_argument("--planner-min-samples", type=int, default=20, metavar="N",
                   help="a round decides on at least N samples of the metric that is off target")
    g.add_argument("--planner-drain-timeout", type=float, default=120.0, metavar="S",
                   help="a self-registered worker being switched drains at most S seconds, then "
                        "switches anyway (in-process: what still runs finishes)")
    g.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    add_queue_arguments(g)
    add_accounts_arguments(g)
    add_usage_arguments(g)
    add_tracing_arguments(g)
    add_fair_queue_arguments(g)
    g.set_defaults(func=gateway)


def gateway_config_from_args(args: argparse.Namespace) -> GatewayConfig:
    api_keys = tuple(k for key in args.api_key for k in key.split(",") if k)
    secret = cluster_secret_from_args(args, "gateway")
    check_distinct(secret, api_keys, "gateway")
    queue = queue_config_from_args(args, args.port)
    return GatewayConfig(
        workers=tuple(args.worker), prefill=tuple(args.prefill), decode=tuple(args.decode),
        policy=args.policy, prefill_policy=args.prefill_policy, decode_policy=args.decode_policy,
        model_path=args.model, served_model_name=args.served_model_name, chat_template=args.chat_template,
        sampling_defaults=SamplingDefaults.for_model(args.model, args.generation_config,
                                                     args.override_generation_config)
        if args.model else SamplingDefaults(), **parser_settings(args), host=args.host,
        port=args.port, api_keys=api_keys, cluster_secret=secret,
        share_prefix_cache=args.share_prefix_cache, shared_prefixes=shared_prefixes_from_args(args),
        allowed_origins=args.allowed_origins,
        registry=RegistryConfig(poll_interval_s=args.poll_interval, probe_timeout_s=args.probe_timeout,
                                unhealthy_after=args.unhealthy_after, heartbeat_ttl_s=args.heartbeat_ttl,
                                register_probe_timeout_s=args.register_probe_timeout,
                                allow_loopback_workers=args.allow_loopback_workers),
        connect_timeout_s=args.connect_timeout, worker_read_timeout_s=args.worker_read_timeout,
        admission=AdmissionLimits(max_in_flight=args.max_in_flight, max_waiting=args.max_waiting,
                                  max_tokens=args.max_inflight_tokens_per_worker,
                                  tenant_overflow=args.tenant_overflow),
        fair_queue=fair_queue_config_from_args(args),
        placement=PlacementConfig(enabled=args.prefill_placement == "auto",
                                  stall_weight=args.placement_stall_weight,
                                  keep_prefix=args.placement_keep_prefix),
        local_prefill_tokens=args.local_prefill_tokens,
        planner=PlannerConfig(slo_ttft_ms=args.slo_ttft_ms, slo_itl_ms=args.slo_itl_ms,
                              interval_s=args.planner_interval, cooldown_s=args.planner_cooldown,
                              min_samples=args.planner_min_samples),
        role_switch_drain_s=args.planner_drain_timeout,
        queue=queue, **accounts_settings(args, queue, "gateway"),
        usage=usage_config_from_args(args, queue is not None),
        tracing=tracing_config_from_args(args, "tandem-gateway", "gateway"))


def gateway(args: argparse.Namespace) -> int:
    config = gateway_config_from_args(args)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    warning = exposure_warning(gateway=True, registers=False, api_keys=config.api_keys,
                               secret=config.cluster_secret, accounts=config.accounts)
    if warning:
        logging.getLogger(__name__).warning("%s", warning)
    tokenizer, name, max_len = model_facts(config.model_path, config.served_model_name, config.chat_template)
    app = build_gateway_app(config, tokenizer, name, max_len)
    # Everything imported so far lives as long as the process: keep it out of the collector's
    # full passes, which would otherwise walk ~10^5 objects (~100 ms) in the request path.
    gc.collect()
    gc.freeze()
    uvicorn.run(app, host=config.host, port=config.port, loop="auto", http="auto",
                log_level=args.log_level, access_log=False, timeout_graceful_shutdown=5)
    return 0
