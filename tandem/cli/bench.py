"""`tandem bench serve | compare | topology`: flags, turned into frozen configs in one place.

tandem/cli/__init__.py calls `register(subparsers)`; each subcommand sets `func(args) -> int`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import httpx

from tandem.bench.agentic import AgenticConfig
from tandem.bench.compare import compare_files
from tandem.bench.engine_bench import register_engine
from tandem.bench.metrics import SLO, summarize
from tandem.bench.report import distribution_rows
from tandem.bench.runner import LoadConfig
from tandem.bench.sample import RequestSample
from tandem.bench.serve import BenchConfig, run_bench_sync
from tandem.bench.topology import TopologyConfig, parse_configs, run_topology
from tandem.bench.trace import TraceConfig


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1000.0


def _range_s(text: str) -> tuple[float, float]:
    """'0.5:10' -> (0.5, 10.0): a range of seconds, 0 <= LO <= HI."""
    lo, sep, hi = text.partition(":")
    try:
        low, high = float(lo), float(hi)
    except ValueError:
        low = high = -1.0
    if not sep or not 0 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO:HI seconds with 0 <= LO <= HI, e.g. 0.5:10")
    return low, high


def add_workload_args(p: argparse.ArgumentParser, model_flag: str = "--model") -> None:
    """Workload, load, client, SLO and output flags shared by `serve` and `topology`.

    `model_flag` names the served-model flag (topology uses --model for the directory)."""
    w = p.add_argument_group("workload (one of)")
    src = w.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="FILE", help="Mooncake-format trace (JSONL) to replay")
    src.add_argument("--agentic", action="store_true", help="generate agentic multi-turn sessions")

    t = p.add_argument_group("trace replay")
    t.add_argument("--tokens-per-block", type=int, default=16, help="tokens per hash id after scaling (default 16)")
    t.add_argument("--trace-block-size", type=int, default=512, help="tokens per hash id in the trace (default 512)")
    t.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply trace timestamps (0.1 = ten times faster; default 1)")
    t.add_argument("--max-input-tokens", type=int, help="clamp scaled prompt lengths")
    t.add_argument("--output-scale", type=float, default=1.0, help="multiply output_length (default 1)")
    t.add_argument("--max-output-tokens", type=int, help="clamp output lengths")
    t.add_argument("--tokenizer", metavar="MODEL_DIR",
                   help="model directory whose vocabulary gives prompt token ids (default: the server's "
                        "model root if it is a local directory)")
    t.add_argument("--vocab-range", metavar="LO:HI", help="draw prompt token ids from [LO, HI) instead")

    a = p.add_argument_group("agentic sessions")
    d = AgenticConfig()
    a.add_argument("--sessions", type=int, default=d.num_sessions)
    a.add_argument("--turns", type=int, default=d.turns, help="requests per session")
    a.add_argument("--tenants", type=int, default=d.num_tenants)
    a.add_argument("--system-tokens", type=int, default=d.system_tokens)
    a.add_argument("--tool-tokens", type=int, default=d.tool_tokens)
    a.add_argument("--num-tools", type=int, default=d.num_tools)
    a.add_argument("--user-tokens", type=int, default=d.user_tokens)
    a.add_argument("--tool-result-tokens", type=int, default=d.tool_result_tokens)
    a.add_argument("--output-tokens", type=int, default=d.output_tokens, help="max_tokens of every turn")
    a.add_argument("--think-time", type=float, default=d.think_time_s, help="mean pause between turns (s)")
    a.add_argument("--think-time-range", type=_range_s, default=None, metavar="LO:HI",
                   help="pauses drawn uniformly from [LO, HI] s instead (e.g. 0.5:10, tool runs)")
    a.add_argument("--no-session-header", action="store_true",
                   help="send no x-session-affinity (as most agent harnesses)")
    a.add_argument("--agent-hints", action="store_true",
                   help="each turn sends x-agent-expect-next-turn-s: its session's next think time (0 on the last)")
    a.add_argument("--send-tools", action="store_true", help="send `tools` instead of tools in the system prompt")
    a.add_argument("--tool-result-role", default=d.tool_result_role, choices=("user", "tool"))

    ld = p.add_argument_group("load and bounds")
    ld.add_argument("--concurrency", type=int,
                    help="closed loop: sessions at once (agentic default 4; trace default: open loop)")
    ld.add_argument("--request-rate", type=float,
                    help="open loop Poisson rate: trace requests/s (instead of timestamps) or agentic sessions/s")
    ld.add_argument("--max-requests", type=int, help="send at most this many requests")
    ld.add_argument("--duration", type=float, help="send no request after this many seconds")
    ld.add_argument("--drain-timeout", type=float, default=120.0,
                    help="cancel requests still running this long after the last send (with --duration)")
    ld.add_argument("--seed", type=int, default=0)
    ld.add_argument("--warmup", type=int, default=1,
                    help="unrecorded short requests before the run (default 1)")

    c = p.add_argument_group("client")
    c.add_argument(model_flag, dest="served_model", help="model name (default: first of GET /v1/models)")
    c.add_argument("--endpoint", choices=("completions", "chat"),
                   help="default: completions (token ids) for traces, chat for agentic")
    c.add_argument("--api-key")
    c.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                   help="send ignore_eos so outputs have the workload's lengths (default on)")
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--continuous-usage-stats", action="store_true",
                   help="ask for usage in every chunk (exact tokens per chunk; vLLM supports it)")
    c.add_argument("--request-timeout", type=float, default=600.0, help="seconds without a byte")

    s = p.add_argument_group("SLOs for goodput (ms)")
    s.add_argument("--slo-ttft-ms", type=float)
    s.add_argument("--slo-tpot-ms", type=float)
    s.add_argument("--slo-e2e-ms", type=float)

    o = p.add_argument_group("output")
    o.add_argument("--out", default="bench-results", help="directory for the report (default bench-results)")
    o.add_argument("--label", help="run name (default: workload-model)")
    o.add_argument("--no-plots", action="store_true")
    o.add_argument("--no-progress", action="store_true")


def config_from_args(args: argparse.Namespace, url: str | None = None) -> BenchConfig:
    trace = TraceConfig(tokens_per_block=args.tokens_per_block, trace_block_size=args.trace_block_size,
                        time_scale=args.time_scale,
                        request_rate=args.request_rate if args.trace else None,
                        max_input_tokens=args.max_input_tokens, output_scale=args.output_scale,
                        max_output_tokens=args.max_output_tokens, max_requests=args.max_requests,
                        seed=args.seed)
    agentic = AgenticConfig(num_sessions=args.sessions, turns=args.turns, num_tenants=args.tenants,
                            system_tokens=args.system_tokens, tool_tokens=args.tool_tokens,
                            num_tools=args.num_tools, user_tokens=args.user_tokens,
                            tool_result_tokens=args.tool_result_tokens, output_tokens=args.output_tokens,
                            think_time_s=args.think_time, think_time_range_s=args.think_time_range,
                            affinity_header=not args.no_session_header,
                            session_rate=args.request_rate if args.agentic else None,
                            send_tools=args.send_tools, tool_result_role=args.tool_result_role,
                            seed=args.seed)
    concurrency = args.concurrency
    if args.agentic and concurrency is None and args.request_rate is None:
        concurrency = 4
    load = LoadConfig(concurrency=concurrency, max_requests=args.max_requests,
                      duration_s=args.duration, drain_timeout_s=args.drain_timeout,
                      agent_hints=args.agent_hints)
    return BenchConfig(
        url=url or args.url, trace_path=args.trace, trace=trace, agentic=agentic, load=load,
        slo=SLO(_ms(args.slo_ttft_ms), _ms(args.slo_tpot_ms), _ms(args.slo_e2e_ms)),
        model=args.served_model, endpoint=args.endpoint, api_key=args.api_key,
        tokenizer=args.tokenizer, vocab_range=args.vocab_range, ignore_eos=args.ignore_eos,
        temperature=args.temperature, continuous_usage_stats=args.continuous_usage_stats,
        request_timeout_s=args.request_timeout, warmup=args.warmup, out_dir=args.out, label=args.label,
        plots=not args.no_plots, progress=not args.no_progress,
        command=shlex.join(["tandem", *sys.argv[1:]]) if sys.argv else "")


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        result = run_bench_sync(config_from_args(args))
    except (httpx.HTTPError, OSError, ValueError, RuntimeError) as exc:
        print(f"tandem bench serve: {exc}", file=sys.stderr)
        return 2
    samples = [RequestSample.from_dict(s) for s in result.report["samples"]]
    summary = summarize(samples, SLO(**result.report["meta"]["slo"]))
    print("\n".join(distribution_rows(summary)))
    cached = "-" if summary.cached_ratio is None else f"{100 * summary.cached_ratio:.1f}%"
    ideal = "-" if summary.ideal_cached_ratio is None else f"{100 * summary.ideal_cached_ratio:.1f}%"
    print(f"completed {summary.completed}/{summary.requests}, {summary.output_throughput:.1f} output tok/s, "
          f"cached {cached} (ideal {ideal})")
    if summary.error_kinds:
        first = next(s.error for s in samples if not s.ok)
        print(f"errors: {summary.error_kinds}; first: {first}")
    print(f"report: {result.json_path} {result.md_path}")
    return 0 if summary.completed else 1


def _cmd_compare(args: argparse.Namespace) -> int:
    text = compare_files(args.reports, args.labels.split(",") if args.labels else None)
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return 0


def _up_args(args: argparse.Namespace) -> tuple[str, ...]:
    worker = list(args.worker_arg)
    if args.worker_threads:
        worker.append(f"--threads={args.worker_threads}")
    return tuple(f"--worker-arg={w}" for w in worker) + tuple(shlex.split(args.tandem_args or ""))


def _cmd_topology(args: argparse.Namespace) -> int:
    cfg = TopologyConfig(model=args.model, configs=parse_configs(args.configs),
                         policies=tuple(p for p in (args.policies or "").split(",") if p),
                         port=args.port, ready_timeout_s=args.ready_timeout,
                         tandem_args=_up_args(args),
                         out_dir=args.out)
    text = run_topology(cfg, lambda url: config_from_args(args, url=url))
    print(text, end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    bench = subparsers.add_parser("bench", help="benchmarks: workloads, reports, comparisons")
    sub = bench.add_subparsers(dest="bench_command", required=True)

    serve = sub.add_parser("serve", help="run a workload against a server and write a report")
    serve.add_argument("--url", required=True, help="server or gateway base URL, e.g. http://127.0.0.1:8000")
    add_workload_args(serve)
    serve.set_defaults(func=_cmd_serve)

    cmp_ = sub.add_parser("compare", help="put reports side by side with ratios against the first")
    cmp_.add_argument("reports", nargs="+", metavar="REPORT.json")
    cmp_.add_argument("--labels", help="comma-separated column names (default: the reports' labels)")
    cmp_.add_argument("--out", help="also write the markdown table here")
    cmp_.set_defaults(func=_cmd_compare)

    topo = sub.add_parser("topology", help="start each configuration with `tandem up`, run the same workload, compare")
    topo.add_argument("--model", required=True, help="model directory served by every configuration")
    topo.add_argument("--configs", required=True,
                      help='comma-separated: "colocated:N" or "pd:P:D", e.g. "colocated:2,pd:1:1"')
    topo.add_argument("--policies", help="comma-separated gateway policies to try on each configuration")
    topo.add_argument("--port", type=int, default=8100, help="port of the gateway under test")
    topo.add_argument("--ready-timeout", type=float, default=600.0)
    topo.add_argument("--worker-threads", type=int,
                      help="torch threads of every worker (passed as --worker-arg=--threads=N)")
    topo.add_argument("--worker-arg", action="append", default=[],
                      help="extra argument for every worker, repeatable; write --worker-arg=--flag=value")
    topo.add_argument("--tandem-args", help='extra flags for `tandem up`; write --tandem-args="--flag value"')
    add_workload_args(topo, model_flag="--served-model")
    topo.set_defaults(func=_cmd_topology)

    # engine microbenchmarks (throughput, batch-1 decode, cold start) live in engine_bench.py
    register_engine(sub)
    return bench
