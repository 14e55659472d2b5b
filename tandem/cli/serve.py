"""`tandem serve`: one worker (engine + HTTP API) on one port.

  tandem serve --model PATH [--role both|prefill|decode] [--host 127.0.0.1] [--port 8000]
               [--dtype auto|float32|bfloat16] [--gateway URL] [--api-key KEY ...]
               [--share-prefix-cache | --shared-prefixes FILE]
               [--cluster-secret-file FILE | --cluster-secret SECRET]
               [--queue-db [FILE] | --queue-url URL | --no-queue] [--accounts]
               [--rate-limits FILE] [--rate-limit NAME=VALUE ...] [--pricing FILE]
               [--otlp-endpoint URL] [--otlp-service-name NAME] ...
      standalone (no --gateway, role both) it serves the asynchronous batch API by default;
      /internal/* routes take only the cluster secret (also $TANDEM_CLUSTER_SECRET; tandem/api/auth.py)

Flags become the frozen EngineConfig and ServerConfig here and nowhere else.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace

import torch

from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig
from tandem.cli.accounts_flags import accounts_settings, add_accounts_arguments
from tandem.cli.arg_types import origins, parse_bytes
from tandem.cli.cpu_threads import threads_arg, usable_cores
from tandem.cli.gpu_flags import add_gpu_flags, gpu_settings
from tandem.cli.grammar_flags import add_grammar_arguments, grammar_config_from_args
from tandem.cli.kvstore_flags import add_kv_store_arguments, kv_store_config_from_args
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
from tandem.cli.vllm_flags import add_vllm_flags, prefix_caching
from tandem.config import (
    CacheConfig,
    EngineConfig,
    ModelConfig,
    RetentionConfig,
    SchedulerConfig,
    SpeculativeConfig,
    ThreadGovernorConfig,
    TransferConfig,
)
from tandem.engine.async_engine import AsyncEngine
from tandem.engine.engine import Engine
from tandem.errors import ModelLoadError
from tandem.parallel.config import ParallelConfig
from tandem.parallel.launch import parallel_engine
from tandem.spec.registry import methods_help, parse_speculative_config
from tandem.tokenization.chat_template_arg import chat_template_arg
from tandem.turn.parser_setup import add_parser_flags, parser_settings
from tandem.turn.sampling_defaults import GENERATION_CONFIG_MODES, SamplingDefaults, add_override_flag
from tandem.worker.drain import DrainConfig
from tandem.worker.process import run_worker

log = logging.getLogger(__name__)


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text}")
    return value


def speculative_config(text: str) -> SpeculativeConfig:
    """--speculative-config JSON (vLLM's form); a bad value is a usage error naming the problem."""
    try:
        return parse_speculative_config(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve one model as a worker (OpenAI + Workers AI API)")
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--role", default="both", choices=("both", "prefill", "decode"))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N; auto: cuda when available")
    p.add_argument("--no-pack-weights", dest="pack_weights", action="store_false",
                   help="CPU bfloat16: keep the checkpoint's memory-mapped weights instead of packing "
                        "them into oneDNN's layout (less RAM, slower matrix products)")
    p.add_argument("--no-verify-checksums", dest="verify_checksums", action="store_false",
                   help="load a checkpoint even when its files differ from its checksums.sha256 "
                        "manifest (checking reads every byte once, ~1-2 GB/s; no manifest: no check)")
    p.add_argument("--no-fused-layers", dest="fused_layers", action="store_false",
                   help="CPU: run RMSNorm, SiLU-mul and rotary as torch ops instead of single-pass C "
                        "kernels (compiled on first use like the attention kernels)")
    p.add_argument("--attention", choices=("auto", "native", "sdpa", "triton"), default="auto",
                   help="attention kernels: auto = the native CPU decode kernel (compiled with cc on "
                        "first use, cached in ~/.cache/tandem/kernels) for float32/bfloat16, and in "
                        "bfloat16 on a CPU with AMX tiles the AMX prefill kernel, else torch SDPA; "
                        "native = the decode kernel or an error (prefill as auto); sdpa = torch only; "
                        "triton = the Triton paged kernels on CUDA (decode, prefill, MLA), read in place")
    add_gpu_flags(p)
    p.add_argument("--max-model-len", type=_positive, default=None,
                   help="default: the model's max_position_embeddings")
    p.add_argument("--block-size", type=_positive, default=CacheConfig.block_size)
    p.add_argument("--kv-cache-memory", type=parse_bytes, default=None,
                   help="memory for KV blocks, e.g. 4GiB; default: 512MiB on the CPU, on a GPU what "
                        "--gpu-memory-utilization leaves after the weights and a step's activations")
    p.add_argument("--gpu-memory-utilization", type=_fraction, default=CacheConfig.gpu_memory_utilization,
                   help="share of a GPU's memory this worker may use, weights, activations and KV cache "
                        "together (as vLLM's)")
    p.add_argument("--num-kv-blocks", type=_positive, default=None,
                   help="exact number of KV blocks (overrides --kv-cache-memory)")
    p.add_argument("--kv-cache-dtype", choices=CacheConfig.KV_CACHE_DTYPES, default=CacheConfig.kv_cache_dtype,
                   help="KV cache storage: auto = the model's dtype; fp8_e5m2 = one byte per value "
                        "(twice the blocks per byte of memory, cheaper decode over long contexts, "
                        "K/V rounded to 3 significant bits)")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--max-num-batched-tokens", type=_positive,
                   default=SchedulerConfig.max_num_batched_tokens)
    p.add_argument("--max-num-seqs", type=_positive, default=SchedulerConfig.max_num_seqs)
    p.add_argument("--long-prefill-token-threshold", type=int,
                   default=SchedulerConfig.long_prefill_token_threshold,
                   help="largest prefill chunk of one prompt while others wait (0: no cap)")
    p.add_argument("--background-chunk-tokens", type=int, default=SchedulerConfig.background_chunk_tokens,
                   help="largest prefill chunk of a background prompt (the queue's batch work) in "
                        "any step (0: no cap)")
    p.add_argument("--scheduling-policy", choices=SchedulerConfig.SCHEDULING_POLICIES,
                   default=SchedulerConfig.scheduling_policy,
                   help="priority: requests' `priority` orders the waiting queue, prefill chunks and "
                        "preemption (lower first, vLLM's meaning), first come first served within one; "
                        "fcfs: arrival order (priority only weighs in the order of prefill chunks)")
    p.add_argument("--priority-aging-s", type=_positive_float, default=SchedulerConfig.priority_aging_s,
                   help="with --scheduling-policy priority, a waiting request counts one priority better "
                        "per this many seconds waited: the bound on how long a worse priority waits")
    p.add_argument("--kv-retention-share", type=_share, default=RetentionConfig.share,
                   help="KV retention across an agent's tool calls: at most this share of the device KV "
                        "blocks is held for sessions whose turn ended in a tool call (or sent a hint) "
                        "until their next turn; 0 turns it off")
    p.add_argument("--kv-retention-max-s", type=_positive_float, default=RetentionConfig.max_s,
                   help="longest a session's KV is retained for its next turn (learned gaps and "
                        "client hints are held to it)")
    p.add_argument("--kv-retention-default-s", type=_positive_float, default=RetentionConfig.default_gap_s,
                   help="retention of a session and tenant whose gaps between turns are not known yet")
    p.add_argument("--threads", type=threads_arg, default=None,
                   help="compute threads of the worker, at most the cores it may use (CPU affinity and "
                        "cgroup quota; the default); a parallel worker's ranks split them")
    p.add_argument("--no-adaptive-threads", dest="adaptive_threads", action="store_false",
                   help="keep --threads compute threads while other processes take some of the cores "
                        "(by default one fewer per second that they wait for a core, all again once the "
                        "cores given up sit idle, at the latest after 10 s)")
    p.add_argument("--tensor-parallel-size", type=_positive, default=1,
                   help="ranks splitting each layer's heads and MLP (one process each; see --distributed-backend)")
    p.add_argument("--pipeline-parallel-size", type=_positive, default=1,
                   help="ranks holding consecutive stages of the layers")
    p.add_argument("--enable-expert-parallel", action="store_true",
                   help="MoE models: whole experts per tensor-parallel rank instead of slices of every expert")
    p.add_argument("--expert-dispatch", choices=("allreduce", "alltoall"), default="allreduce",
                   help="with --enable-expert-parallel: combine expert outputs with one all-reduce, or "
                        "dispatch tokens to their experts' ranks and back (all-to-all)")
    p.add_argument("--distributed-backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="torch.distributed backend of a parallel worker; auto: gloo on the CPU, NCCL on "
                        "CUDA when each rank has a GPU of its own, else gloo through host memory")
    p.add_argument("--kv-transport", default=None, choices=("tcp", "shm", "mooncake"),
                   help="KV handoff transport (prefill/decode roles default to tcp)")
    p.add_argument("--kv-pin-timeout", type=float, default=TransferConfig.pin_timeout_s,
                   help="prefill role: seconds handed-over KV blocks stay pinned without a pull")
    p.add_argument("--kv-transfer-port", type=int, default=0,
                   help="port of the KV transfer control server (0: a free port)")
    p.add_argument("--kv-advertise-host", default=None, metavar="ADDR",
                   help="the address other workers reach this worker's KV at (the transfer control "
                        "server, Mooncake's segments for the handoff and the store); default: --host, "
                        "or 127.0.0.1 when --host is a wildcard")
    p.add_argument("--kv-bind-host", default=None, metavar="ADDR",
                   help="the address the KV transfer control server binds when it is not the one "
                        "advertised (a relay or NAT in front of it); default: --kv-advertise-host")
    p.add_argument("--kv-connect-timeout", type=float, default=TransferConfig.connect_timeout_s,
                   metavar="S", help="decode side: seconds to connect to a prefill worker's KV source")
    p.add_argument("--kv-io-timeout", type=float, default=TransferConfig.io_timeout_s, metavar="S",
                   help="seconds a KV transfer may make no progress before it fails (the decode "
                        "worker then recomputes the prompt; the prefill side frees its blocks)")
    p.add_argument("--kv-mooncake-protocol", choices=("tcp", "rdma"), default=TransferConfig.mooncake_protocol,
                   help="Mooncake's transport, for --kv-transport mooncake and --kv-store")
    p.add_argument("--kv-mooncake-device", default="", metavar="NAMES",
                   help="with rdma: the RDMA device names Mooncake uses (e.g. mlx5_0,mlx5_1)")
    add_kv_store_arguments(p)
    p.add_argument("--speculative-config", type=speculative_config, default=None, metavar="JSON",
                   help='speculative decoding, as vLLM: {"method": ' + methods_help() + ', '
                        '"num_speculative_tokens": 4, "model": DRAFT_DIR, "prompt_lookup_min": 2, '
                        '"prompt_lookup_max": 5}')
    p.add_argument("--served-model-name", default=None, help="default: the model directory's name")
    p.add_argument("--chat-template", type=chat_template_arg, default=None, metavar="FILE|TEMPLATE",
                   help="a Jinja chat template (its file, or the template on one line) in place of the "
                        "model's own")
    p.add_argument("--generation-config", default="auto", choices=GENERATION_CONFIG_MODES,
                   help="auto: sampling defaults from the model's generation_config.json (as vLLM); "
                        "vllm: the API's own defaults")
    add_override_flag(p)
    add_parser_flags(p)
    add_grammar_arguments(p)
    add_vllm_flags(p)
    p.add_argument("--api-key", action="append", default=[],
                   help="accepted Bearer key (repeatable); none: no authentication")
    p.add_argument("--share-prefix-cache", action="store_true",
                   help="tenants (API keys) share the prefix cache: a prompt one tenant sent is a "
                        "cache hit for another (off: each tenant's KV is its own; requests may "
                        "still separate theirs with cache_salt)")
    add_shared_prefix_argument(p)
    p.add_argument("--allowed-origins", type=origins, default="*",
                   help="comma-separated origins browsers may call from (CORS); '' for none")
    p.add_argument("--gateway", default=None,
                   help="gateway URL to register with (heartbeats until shutdown); several gateways: "
                        "URL1,URL2 (registers with each)")
    p.add_argument("--gateway-api-key", default=None, help=argparse.SUPPRESS)  # refused: see below
    add_cluster_secret_arguments(p)
    p.add_argument("--advertise-url", default=None,
                   help="URL the gateway uses to reach this worker; default from --host/--port")
    p.add_argument("--drain-timeout", type=float, default=DrainConfig.timeout_s, metavar="S",
                   help="on SIGTERM: refuse new requests, let running ones finish for at most S "
                        "seconds, deregister, then stop (a second SIGTERM stops at once)")
    p.add_argument("--max-body-bytes", type=parse_bytes, default=ServerConfig.max_body_bytes)
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument("--access-log", action="store_true")
    add_queue_arguments(p)
    add_accounts_arguments(p)
    add_usage_arguments(p)
    add_tracing_arguments(p)
    p.set_defaults(func=serve)


def _device(name: str) -> str:
    if name != "auto":
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def retention_config_from_args(args: argparse.Namespace) -> RetentionConfig:
    max_s = args.kv_retention_max_s
    default = min(args.kv_retention_default_s, max_s)
    return RetentionConfig(share=args.kv_retention_share, default_gap_s=default, max_s=max_s,
                           min_gap_s=min(RetentionConfig.min_gap_s, default))


def configs_from_args(args: argparse.Namespace) -> tuple[EngineConfig, ServerConfig]:
    if args.gateway_api_key is not None:
        raise SystemExit("tandem serve: --gateway-api-key is gone: a tenant key never opens a gateway's "
                         "/internal routes; give this worker and its gateway the same --cluster-secret-file")
    api_keys = tuple(k for key in args.api_key for k in key.split(",") if k)
    secret = cluster_secret_from_args(args, "serve")
    check_distinct(secret, api_keys, "serve")
    device = _device(args.device)
    engine = EngineConfig(
        model=ModelConfig(path=args.model, dtype=args.dtype, device=device,
                          served_name=args.served_model_name, max_model_len=args.max_model_len,
                          chat_template=args.chat_template,
                          pack_weights=args.pack_weights, attention=args.attention,
                          fused_layers=args.fused_layers, verify_checksums=args.verify_checksums,
                          **gpu_settings(args, device)),
        cache=CacheConfig(block_size=args.block_size, kv_cache_bytes=args.kv_cache_memory,
                          gpu_memory_utilization=args.gpu_memory_utilization,
                          num_blocks=args.num_kv_blocks, kv_cache_dtype=args.kv_cache_dtype,
                          enable_prefix_caching=prefix_caching(args)),
        scheduler=SchedulerConfig(max_num_batched_tokens=args.max_num_batched_tokens,
                                  max_num_seqs=args.max_num_seqs,
                                  long_prefill_token_threshold=args.long_prefill_token_threshold,
                                  background_chunk_tokens=args.background_chunk_tokens,
                                  scheduling_policy=args.scheduling_policy,
                                  priority_aging_s=args.priority_aging_s),
        role=args.role, num_threads=args.threads or usable_cores(),
        threads=ThreadGovernorConfig(enabled=args.adaptive_threads), kv_transport=args.kv_transport,
        transfer=transfer_config(args, secret),
        kv_store=kv_store_config_from_args(args), speculative=args.speculative_config, seed=args.seed,
        grammar=grammar_config_from_args(args), retention=retention_config_from_args(args))
    if engine.resolved_transport == "shm" and engine.model.device != "cpu":
        raise SystemExit(f"tandem serve: --kv-transport shm keeps the KV cache in host memory; on "
                         f"{engine.model.device} use tcp or mooncake, or pass --device cpu")
    server = ServerConfig(served_model_name=args.served_model_name,
                          sampling_defaults=SamplingDefaults.for_model(
                              args.model, args.generation_config, args.override_generation_config),
                          **parser_settings(args),
                          api_keys=api_keys, cluster_secret=secret,
                          share_prefix_cache=args.share_prefix_cache,
                          shared_prefixes=shared_prefixes_from_args(args),
                          allowed_origins=args.allowed_origins,
                          max_body_bytes=args.max_body_bytes, host=args.host, port=args.port,
                          gateway_url=args.gateway,
                          advertise_url=args.advertise_url,
                          log_level=args.log_level,
                          access_log=args.access_log,
                          tracing=tracing_config_from_args(
                              args, "tandem-worker" if args.role == "both" else f"tandem-{args.role}",
                              "serve"),
                          **accounts_settings(args, _queue_config(args), "serve"))
    return engine, server


def _queue_config(args: argparse.Namespace) -> QueueConfig | None:
    # standalone, the server is its own gateway: the queue is on unless --no-queue
    return queue_config_from_args(args, args.port, default_on=args.gateway is None and args.role == "both")


def _parallel_engine(args: argparse.Namespace, engine_config: EngineConfig):
    """The engine of a worker spread over ranks (tandem.parallel), started now; None for one process."""

    try:
        pcfg = ParallelConfig(tensor_parallel_size=args.tensor_parallel_size,
                              pipeline_parallel_size=args.pipeline_parallel_size,
                              enable_expert_parallel=args.enable_expert_parallel,
                              expert_dispatch=args.expert_dispatch,
                              distributed_backend=args.distributed_backend)
    except ValueError as exc:
        raise SystemExit(f"tandem serve: {exc}") from None
    if not pcfg.enabled:
        return None

    try:
        return parallel_engine(engine_config, pcfg)
    except ValueError as exc:
        raise SystemExit(f"tandem serve: {exc}") from None


def _load_engine(config: EngineConfig) -> Engine:
    """The engine, loaded before the HTTP server starts (it would only start once the engine is
    up anyway): a checkpoint that cannot load ends the command with its reason, not a traceback."""
    try:
        return Engine.from_config(config)
    except ModelLoadError as exc:
        raise SystemExit(f"tandem serve: cannot load the model: {exc}") from None


def transfer_config(args: argparse.Namespace, cluster_secret: str | None = None) -> TransferConfig:
    advertised = args.kv_advertise_host or (
        args.host if args.host not in ("", "0.0.0.0", "::") else "127.0.0.1")
    bind = args.kv_bind_host or advertised
    return TransferConfig(host=bind, advertise_host=advertised if advertised != bind else None,
                          port=args.kv_transfer_port, pin_timeout_s=args.kv_pin_timeout,
                          connect_timeout_s=args.kv_connect_timeout, io_timeout_s=args.kv_io_timeout,
                          mooncake_protocol=args.kv_mooncake_protocol,
                          mooncake_device=args.kv_mooncake_device, mooncake_bind_address=advertised,
                          cluster_secret=cluster_secret)


def serve(args: argparse.Namespace) -> int:
    engine_config, server_config = configs_from_args(args)
    logging.basicConfig(level=server_config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    warning = exposure_warning(gateway=False, registers=server_config.gateway_url is not None,
                               api_keys=server_config.api_keys, secret=server_config.cluster_secret,
                               accounts=server_config.accounts)
    if warning:
        log.warning("%s", warning)
    queue_config = _queue_config(args)
    server_config = replace(server_config, usage=usage_config_from_args(args, queue_config is not None))
    engine = _parallel_engine(args, engine_config)
    if engine is None:
        engine = _load_engine(engine_config)
    run_worker(AsyncEngine(engine_config, engine), server_config, queue_config,
               DrainConfig(timeout_s=args.drain_timeout))
    return 0
