"""Two source trees of tandem side by side on the engine microbenchmarks: offline throughput and
batch-1 decode, in alternating child processes (A, B, A, B, ...), so that load from anything else
on the machine hits both alike. For a refactor that must change no speed ("within noise").

Each child imports tandem from its tree (PYTHONPATH), builds the offline engine of
`tandem.bench.engine_bench` (same model, same KV room, same scheduler) and runs one throughput
workload (fixed seed) and one batch-1 decode; the parent prints medians and B/A ratios as
Markdown and writes the raw runs as JSON.

  python benchmarks/ab_engine.py --a /tmp/before --b . --reps 3 --dtype float32 --out ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, torch
from tandem.bench.engine_bench import EngineBenchConfig, ModelShape, ensure_model, tandem_llm
from tandem.bench.engine_measure import offline_workload, tandem_decode, tandem_throughput
args = json.loads(sys.argv[1])
cfg = EngineBenchConfig(threads=args["threads"], num_requests=args["num_requests"], cache_dir=args["cache_dir"])
model = ensure_model(cfg, args["dtype"])
wl = offline_workload(cfg.num_requests, cfg.prompt_range, cfg.output_range, ModelShape().vocab_size, 0, 1)
llm = tandem_llm(model, args["dtype"], cfg, kv_tokens=wl.prompt_tokens + wl.output_tokens)
llm.generate([[20, 21, 22]], __import__("tandem.types", fromlist=["SamplingParams"]).SamplingParams(max_tokens=2))
tp = tandem_throughput(llm, wl)
dec = tandem_decode(llm, list(range(100, 100 + cfg.decode_prompt)), cfg.decode_tokens, "ab-decode")
print(json.dumps({"output_tok_s": tp.output_tps, "total_tok_s": tp.total_tps,
                  "decode_ms_per_token": dec.tpot_s * 1e3}))
"""


def run_child(tree: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    params = {"threads": args.threads, "num_requests": args.num_requests, "dtype": args.dtype,
              "cache_dir": str(Path(args.cache_dir).resolve())}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(params)], env=env,
                         capture_output=True, text=True, cwd=tree)
    if out.returncode != 0:
        raise RuntimeError(f"the child on {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="baseline tree (e.g. a git worktree of the commit before)")
    p.add_argument("--b", required=True, help="tree under test")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--num-requests", type=int, default=32)
    p.add_argument("--cache-dir", default=".cache")
    p.add_argument("--out", default="ab_engine.json")
    args = p.parse_args()
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    for rep in range(args.reps):
        for side in ("a", "b") if rep % 2 == 0 else ("b", "a"):
            runs[side].append(run_child(getattr(args, side), args))
            print(f"rep {rep} {side}: {runs[side][-1]}", file=sys.stderr)
    Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    print(f"| measurement ({args.dtype}, {args.threads} thread) | A: {args.a} | B: {args.b} | B/A |")
    print("|---|---:|---:|---:|")
    for key in ("output_tok_s", "total_tok_s", "decode_ms_per_token"):
        a = statistics.median(r[key] for r in runs["a"])
        b = statistics.median(r[key] for r in runs["b"])
        print(f"| {key} (median of {args.reps}) | {a:.2f} | {b:.2f} | x{b / a:.3f} |")


if __name__ == "__main__":
    main()
