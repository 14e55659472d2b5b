"""Cached tokens of agentic sessions against the ideal, per topology, in the fleet simulator
(tandem/sim/agentic.py: the shape of `tandem bench`'s agentic workload, closed loop; the cpu
preset with the demo model, i.e. this machine's speed). Issue #35, item 3.

    .venv/bin/python benchmarks/sim/agentic_sessions.py [--out benchmarks/sim/results/agentic_sessions.json]

Runs: "spread" (first turns 2.5 s apart, so no two sessions compute a tenant's system prompt at
once; 16 sessions x 6 turns, 1 s think time), "bench" (the bench's defaults: 8 sessions x 4 turns
all starting at once, 0.5 s think time), "busy" (16 x 6, first turns 1 s apart, 2 s think time).
Per topology the default settings, and placement rule 5 off (keep_prefix=False).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tandem.router.policies.placement import PlacementConfig
from tandem.sim.agentic import AgenticTrace, agentic_trace
from tandem.sim.config import SimConfig, parse_topology
from tandem.sim.fleet import Fleet
from tandem.sim.gateway import GatewayConfig

RUNS = {"spread": AgenticTrace(sessions=16, turns=6, think_s=1.0, session_gap_s=2.5),
        "bench": AgenticTrace(sessions=8, turns=4, think_s=0.5, session_gap_s=0.0),
        "busy": AgenticTrace(sessions=16, turns=6, think_s=2.0, session_gap_s=1.0)}
TOPOLOGIES = ("colocated:2", "colocated:3", "disagg:1p1d", "disagg:2p1d", "disagg:2p2d")


def one(run: str, topology: str, keep_prefix: bool) -> dict:
    cfg = SimConfig(trace="agentic", model="tandem-demo-target", accelerator="cpu", devices=1,
                    topology=parse_topology(topology),
                    gateway=GatewayConfig(PlacementConfig(keep_prefix=keep_prefix)))
    out = Fleet(cfg, agentic_trace(RUNS[run])).run()
    return {"run": run, "topology": topology, "keep_prefix": keep_prefix,
            "of_ideal": out["cache"]["of_ideal"], "ttft_ms": out["ttft_ms"], "itl_ms": out["itl_ms"],
            "completed": out["completed"], "placement": out["placement"], "decisions": out["decisions"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for run in RUNS:
        for topo in TOPOLOGIES:
            for keep in ((True, False) if topo.startswith("disagg") else (True,)):
                r = one(run, topo, keep)
                rows.append(r)
                print(f"{run:7s} {topo:12s} keep_prefix={str(keep):5s} of ideal {r['of_ideal']:.4f}  "
                      f"TTFT p50/p90 {r['ttft_ms']['p50']:.0f}/{r['ttft_ms']['p90']:.0f} ms  "
                      f"ITL p90 {r['itl_ms']['p90']:.1f} ms", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
