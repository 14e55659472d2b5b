"""How long the first request with tools waits once a worker answers: `tandem serve` from each
tree in turn, one chat request with a required tool sent once /v1/models answers (polled every
0.5 s), then a second one (grammar cached, helper warm). Trees alternate per round. Not a test.

  .venv/bin/python benchmarks/first_grammar_request.py --model models/tandem-demo-target \\
      --tree after=. --tree before=/tmp/before --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contention import _free_port, _stop, _wait_ready  # noqa: E402

_REQUEST = {
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "tool_choice": "required", "max_tokens": 16}


def one_round(tree: str, model: str, threads: int, out_dir: Path, label: str) -> tuple[float, float]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    log = open(out_dir / f"{label}.log", "w")
    proc = subprocess.Popen([sys.executable, "-P", "-m", "tandem.cli", "serve", "--model", model,
                             "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, 300)   # polls /v1/models every 0.5 s
        times = []
        for _ in range(2):
            t = time.perf_counter()
            httpx.post(f"{url}/v1/chat/completions", json=_REQUEST, timeout=120).raise_for_status()
            times.append(time.perf_counter() - t)
        return times[0], times[1]
    finally:
        _stop(proc)
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--out", default="bench-results/first-grammar-request")
    a = ap.parse_args()
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    trees = [t.split("=", 1) for t in a.tree]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in trees}
    for r in range(a.rounds):
        for name, tree in (trees if r % 2 == 0 else trees[::-1]):
            runs[name].append(one_round(tree, str(Path(a.model).resolve()), a.threads, out_dir, f"{name}-{r}"))
            print(f"{name} round {r}: first {runs[name][-1][0]:.2f} s, second {runs[name][-1][1]:.2f} s", flush=True)
    print("| tree | first request with tools, s (median; rounds) | second, s (median) |")
    print("|---|---:|---:|")
    for name, _ in trees:
        first = [x[0] for x in runs[name]]
        print(f"| {name} | {statistics.median(first):.2f} ({' / '.join(f'{x:.2f}' for x in first)}) | "
              f"{statistics.median(x[1] for x in runs[name]):.2f} |")
    (out_dir / "first_grammar_request.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
