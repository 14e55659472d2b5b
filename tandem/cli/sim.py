"""`tandem sim`: replay a trace through a simulated fleet and print a JSON summary; or, with
`--calibrate FILE`, fit the cpu preset to measurements and print predicted against measured.

    tandem sim --trace ../shared/traces/mooncake_conversation_trace.jsonl --model kimi-k2.5 \
        --accelerator h100 --devices 8 --topology disagg:2p2d --affinity session --store off
    tandem sim --calibrate benchmarks/sim/results/cpu_measured.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from tandem.planner.policy import PlannerConfig
from tandem.router.policies.placement import PlacementConfig
from tandem.sim.calibrate import calibrate
from tandem.sim.config import SimConfig, parse_topology
from tandem.sim.fleet import simulate
from tandem.sim.gateway import GatewayConfig
from tandem.sim.trace import TraceOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sim", help="fleet simulator: replay a trace through simulated workers",
                              description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--trace", help="Mooncake-format JSONL (../shared/traces/), or 'agentic': the bench's "
                   "agentic sessions, closed loop (tandem/sim/agentic.py)")
    p.add_argument("--model", default="kimi-k2.5", help="preset (kimi-k2.5, llama-3.1-8b, qwen3-30b-a3b, "
                   "llama512, tandem-demo-target) or a model directory")
    p.add_argument("--accelerator", default="h100", choices=("h100", "h200", "b200", "cpu"))
    p.add_argument("--devices", type=int, default=None, help="accelerators per worker (default 8; cpu: 1)")
    p.add_argument("--topology", default="colocated:4", help="colocated:N | disagg:PpDd")
    p.add_argument("--policy", default="default", help="routing policy (tandem gateway --policy)")
    p.add_argument("--affinity", choices=("session", "none"), default="session",
                   help="send each trace session's id as x-session-affinity")
    p.add_argument("--store", choices=("on", "off"), default="off", help="a shared KV store every worker loads from")
    p.add_argument("--store-gb", type=float, default=4000.0)
    p.add_argument("--host-gb", type=float, default=0.0, help="host-memory KV tier per worker")
    p.add_argument("--kv-cache-gb", type=float, default=None, help="KV memory per worker (default: what weights leave)")
    p.add_argument("--prefill-placement", choices=("auto", "remote"), default="auto")
    p.add_argument("--placement-keep-prefix", action=argparse.BooleanOptionalAction, default=False,
                   help="as tandem gateway's (placement rule 5)")
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--long-prefill-token-threshold", type=int, default=None)
    p.add_argument("--slo-ttft-ms", type=float, default=None, help="planner target (enables the planner)")
    p.add_argument("--slo-itl-ms", type=float, default=None, help="planner target (enables the planner)")
    p.add_argument("--planner-interval-s", type=float, default=10.0)
    p.add_argument("--speed", type=float, default=1.0, help="arrival rate multiplier (2: twice the trace's rate)")
    p.add_argument("--length-scale", type=float, default=1.0, help="token length multiplier (1: full size)")
    p.add_argument("--max-requests", type=int, default=None)
    p.add_argument("--duration", type=float, default=None, help="seconds of trace time to replay")
    p.add_argument("--request-rate", type=float, default=None, help="Poisson arrivals instead of the trace's times")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-constants", default=None,
                   help="fitted cpu constants: --calibrate's output (or a JSON of Accelerator fields)")
    p.add_argument("--calibrate", default=None, metavar="MEASURED_JSON",
                   help="fit the cpu preset to benchmarks/sim/measure_cpu.py output and predict its run "
                   "(with --cpu-constants: predict it with constants fitted on another run)")
    p.set_defaults(func=run)


def config_from_args(a: argparse.Namespace):
    constants = json.loads(open(a.cpu_constants).read()) if a.cpu_constants else {}
    constants = constants.get("fitted_cpu_constants", constants)
    devices = a.devices if a.devices is not None else (1 if a.accelerator == "cpu" else 8)
    cfg = SimConfig(
        trace=a.trace, trace_options=TraceOptions(speed=a.speed, length_scale=a.length_scale,
                                                  max_requests=a.max_requests, duration_s=a.duration),
        model=a.model, accelerator=a.accelerator, devices=devices, topology=parse_topology(a.topology),
        policy=a.policy, gateway=GatewayConfig(PlacementConfig(enabled=a.prefill_placement == "auto",
                                                               keep_prefix=a.placement_keep_prefix),
                                               affinity=a.affinity == "session"),
        store=a.store == "on", store_gb=a.store_gb, host_gb=a.host_gb, kv_cache_gb=a.kv_cache_gb,
        planner=PlannerConfig(slo_ttft_ms=a.slo_ttft_ms, slo_itl_ms=a.slo_itl_ms, interval_s=a.planner_interval_s),
        request_rate=a.request_rate, seed=a.seed,
        cpu_constants=constants)
    sched = cfg.scheduler_config()
    if a.max_num_batched_tokens is not None:
        sched = replace(sched, max_num_batched_tokens=a.max_num_batched_tokens)
    if a.long_prefill_token_threshold is not None:
        sched = replace(sched, long_prefill_token_threshold=a.long_prefill_token_threshold)
    return replace(cfg, scheduler=sched)


def run(a: argparse.Namespace) -> int:
    if a.calibrate:
        given = None
        if a.cpu_constants:
            given = json.loads(open(a.cpu_constants).read())
            given = given.get("fitted_cpu_constants", given)
        print(json.dumps(calibrate(a.calibrate, given), indent=2))
        return 0
    if not a.trace:
        print("tandem sim: give --trace PATH (or --calibrate FILE)", file=sys.stderr)
        return 2
    try:
        summary = simulate(config_from_args(a))
    except ValueError as exc:
        print(f"tandem sim: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0
