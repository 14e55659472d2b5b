"""What a second OpenMP team costs the thread that computes (tandem/compute_threads.py).

A decode step's products (one 64-row step of the 6 layers of the 26M-parameter bfloat16 Llama
of docs/benchmarks.md 13: q, k, v, o, gate, up and down, oneDNN-packed as tandem packs them)
timed on a thread that is not the main one, three ways, each in a fresh interpreter:
- `alone`: the thread packs the weights itself, no other thread ever computed (one team);
- `two-teams`: the main thread ran the same products first and kept its team, as a served
  worker's loading thread did before tandem/compute_threads.py;
- `given-back`: the same, then the main thread called compute_alone().
Per way: the median over --repeats of the mean over --calls of one step's products, and the
voluntary context switches of the process over the timed calls (a sleeping barrier is one).
Not a test.

  .venv/bin/python benchmarks/openmp_teams.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import glob, json, os, statistics, sys, threading, time
import torch
sys.path.insert(0, {root!r})
from tandem.compute_threads import compute_alone

way, threads, calls, repeats = {way!r}, {threads}, {calls}, {repeats}
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
pack = lambda w: torch.ops.mkldnn._reorder_linear_weight(w, 64)
linear = lambda x, p: torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "")
shapes = ((512, 512), (256, 512), (256, 512), (512, 512), (1408, 512), (1408, 512), (512, 1408))
data = {{}}

def build():
    data["weights"] = [pack(torch.randn(o, i, dtype=torch.bfloat16, generator=g) * 0.05) for o, i in shapes]
    data["inputs"] = [torch.randn(64, i, dtype=torch.bfloat16, generator=g) for _, i in shapes]

def step():
    for _ in range(6):
        for x, w in zip(data["inputs"], data["weights"]):
            linear(x, w)

def switches():
    return sum(int(open(t + "/status").read().split("\nvoluntary_ctxt_switches:")[1].split()[0])
               for t in glob.glob("/proc/self/task/*"))

if way in ("two-teams", "given-back"):   # the main thread packs and computes first
    build()
    for _ in range(20):
        step()
    if way == "given-back":
        compute_alone()

out = {{}}
def run():
    if not data:
        build()
    for _ in range(20):
        step()
    means, s0 = [], switches()
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            step()
        means.append((time.perf_counter() - t) / calls)
    out["ms"] = 1e3 * statistics.median(means)
    out["switches_per_step"] = (switches() - s0) / (calls * repeats)
t = threading.Thread(target=run)
t.start(); t.join()
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="fresh interpreters per way, alternating")
    ap.add_argument("--out", default="bench-results/openmp-teams.json")
    a = ap.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    ways = ("alone", "two-teams", "given-back")
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    for r in range(a.rounds):
        for way in (ways if r % 2 == 0 else ways[::-1]):
            code = _CHILD.format(root=root, way=way, threads=a.threads, calls=a.calls, repeats=a.repeats)
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            runs[way].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{a.threads} threads, one decode step's products (64 rows), on a second thread:")
    print("| way | ms per step (median of rounds; rounds) | voluntary switches per step |")
    print("|---|---:|---:|")
    for way in ways:
        ms = [x["ms"] for x in runs[way]]
        sw = statistics.median(x["switches_per_step"] for x in runs[way])
        print(f"| {way} | {statistics.median(ms):.2f} ({' / '.join(f'{m:.2f}' for m in ms)}) | {sw:.1f} |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"threads": a.threads, "calls": a.calls, "repeats": a.repeats,
                                       "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
