"""Cloudflare's reported results (blog.cloudflare.com/high-performance-llms, 2026-04-16) in the
fleet simulator, on the Mooncake traces at full size.

1. Disaggregation and inter-token latency: Kimi K2.5 on 4 workers of 8 x H200 each (H100 with
   --accelerator h100), colocated:4 against disagg:2p2d and disagg:3p1d (same GPU count), the
   conversation trace at several speeds (Cloudflare: p90 time per token ~100 ms with high
   variance colocated, 20-30 ms disaggregated: ~3x).
2. Cache hits: colocated:4 on 8 x H200 workers (more KV room), routing without sessions
   (round robin, token-aware), with session affinity (the default policy with x-session-affinity),
   and with a shared KV store (Cloudflare: input-token hit ratio 60% -> 80% with session
   affinity at peak), each against the trace's ideal hit ratio.
3. The planner on the disaggregated fleet with latency targets (one run).

    .venv/bin/python benchmarks/sim/cloudflare.py --out benchmarks/sim/results --plots docs/img

Writes results/cloudflare.json and the plots sim_itl_load.png, sim_itl_cdf.png, sim_hit_ratio.png.
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from tandem.planner.policy import PlannerConfig
from tandem.sim.config import SimConfig, parse_topology
from tandem.sim.fleet import Fleet
from tandem.sim.gateway import GatewayConfig
from tandem.sim.trace import TraceOptions, load_trace

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
CONV = str(TRACES / "mooncake_conversation_trace.jsonl")
SYNTH = str(TRACES / "mooncake_synthetic_trace.jsonl")
Q = np.linspace(0, 100, 201)


TOPOS = ("colocated:4", "disagg:2p2d", "disagg:3p1d")


def experiments(accel: str, speeds: list[float], headline: float, sweep_s: float) -> list[tuple[str, SimConfig]]:
    out = []
    base = SimConfig(trace=CONV, model="kimi-k2.5", accelerator=accel, devices=8)
    for topo in TOPOS:
        for s in speeds:
            out.append((f"itl/{topo}/x{s}", replace(base, topology=parse_topology(topo),
                                                    trace_options=TraceOptions(speed=s, duration_s=sweep_s))))
    for topo in TOPOS:
        out.append((f"itl-full/{topo}/x{headline}", replace(base, topology=parse_topology(topo),
                                                             trace_options=TraceOptions(speed=headline))))
    out.append((f"planner/disagg:2p2d/x{headline}", replace(
        base, topology=parse_topology("disagg:2p2d"), trace_options=TraceOptions(speed=headline),
        planner=PlannerConfig(slo_ttft_ms=1500.0, slo_itl_ms=60.0))))
    h200 = replace(base, accelerator="h200", topology=parse_topology("colocated:4"))
    for trace, name in ((CONV, "conversation"), (SYNTH, "synthetic")):
        t = replace(h200, trace=trace, trace_options=TraceOptions(speed=1.0))
        out += [(f"hits/{name}/round_robin", replace(t, policy="round_robin", gateway=GatewayConfig(affinity=False))),
                (f"hits/{name}/token_aware", replace(t, policy="token_aware", gateway=GatewayConfig(affinity=False))),
                (f"hits/{name}/session_affinity", replace(t, policy="affinity")),
                (f"hits/{name}/default+session", t),
                (f"hits/{name}/round_robin+store", replace(t, policy="round_robin", store=True,
                                                           gateway=GatewayConfig(affinity=False))),
                (f"hits/{name}/default+session+store", replace(t, store=True))]
    return out


def run_one(item: tuple[str, SimConfig]) -> tuple[str, dict]:
    os.nice(19)
    label, cfg = item
    fleet = Fleet(cfg, load_trace(cfg.trace, cfg.trace_options))
    out = fleet.run()
    m = fleet.metrics
    out["itl_quantiles_ms"] = [round(float(v) * 1000, 3) for v in np.percentile(np.asarray(m.itl), Q)]
    out["ttft_quantiles_ms"] = [round(float(v) * 1000, 3) for v in np.percentile(np.asarray(m.ttft), Q)]
    return label, out


def plots(results: dict, accel: str, speeds: list[float], headline: float, outdir: Path) -> None:
    import matplotlib   # lazy: only with --plots; the Agg backend is chosen before pyplot loads
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for topo, style in zip(TOPOS, ("o-", "s-", "^-")):
        rows = [results[f"itl/{topo}/x{s}"] for s in speeds]
        ax[0].plot(speeds, [r["itl_ms"]["p90"] for r in rows], style, label=topo)
        ax[1].plot(speeds, [r["ttft_ms"]["p90"] / 1000 for r in rows], style, label=topo)
    ax[0].set(xlabel="trace speed-up (x arrival rate)", ylabel="p90 ITL (ms)", title=f"Kimi K2.5, 4 x (8 x {accel.upper()})")
    ax[1].set(xlabel="trace speed-up (x arrival rate)", ylabel="p90 TTFT (s)", yscale="log", title="time to first token")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend()
    fig.tight_layout()
    fig.savefig(outdir / "sim_itl_load.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for topo in TOPOS:
        r = results[f"itl-full/{topo}/x{headline}"]
        ax.plot(r["itl_quantiles_ms"], Q / 100, label=f"{topo} (p90 {r['itl_ms']['p90']:.0f} ms)")
    ax.set(xscale="log", xlabel="inter-token latency (ms)", ylabel="CDF",
           title=f"ITL, full conversation trace at x{headline}")
    ax.axhline(0.9, color="grey", lw=0.5)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(outdir / "sim_itl_cdf.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, name in zip(axes, ("conversation", "synthetic")):
        keys = [k for k in results if k.startswith(f"hits/{name}/")]
        labels = [k.split("/", 2)[2] for k in keys]
        vals = [results[k]["cache"]["hit_ratio"] * 100 for k in keys]
        ideal = results[keys[0]]["cache"]["ideal_hit_ratio"] * 100
        ax.barh(labels, vals)
        ax.axvline(ideal, color="red", ls="--", label=f"ideal {ideal:.0f}%")
        ax.set(xlabel="prompt tokens served from cache (%)", title=f"{name} trace, colocated:4 x (8 x H200)")
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(outdir / "sim_hit_ratio.png", dpi=110)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/sim/results")
    p.add_argument("--plots", default="docs/img")
    p.add_argument("--accelerator", default="h200", help="of the disaggregation runs")
    p.add_argument("--speeds", default="1,1.5,2,2.5,3")
    p.add_argument("--headline", type=float, default=3.0, help="speed of the whole-trace runs")
    p.add_argument("--sweep-s", type=float, default=900.0, help="trace seconds per sweep point")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", default=None, help="run experiments whose label starts with one of these (comma-separated)")
    a = p.parse_args()
    speeds = [float(s) for s in a.speeds.split(",")]
    items = experiments(a.accelerator, speeds, a.headline, a.sweep_s)
    if a.only:
        items = [i for i in items if i[0].startswith(tuple(a.only.split(",")))]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "cloudflare.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    with ProcessPoolExecutor(a.jobs) as pool:
        for label, r in pool.map(run_one, items):
            results[label] = r
            print(f"{label}: TTFT p90 {r['ttft_ms']['p90']} ms, ITL p50/p90 {r['itl_ms']['p50']}/{r['itl_ms']['p90']} ms, "
                  f"hits {r['cache']['hit_ratio']:.3f} (ideal {r['cache']['ideal_hit_ratio']:.3f}), "
                  f"{r['completed']}/{r['requests']} done, {r['sim']['wall_s']} s", flush=True)
            path.write_text(json.dumps(results, indent=1))
    if a.plots and not a.only:
        Path(a.plots).mkdir(parents=True, exist_ok=True)
        plots(results, a.accelerator, speeds, a.headline, Path(a.plots))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
