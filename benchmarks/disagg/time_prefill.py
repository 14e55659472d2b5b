"""Size the disaggregation benchmark: one worker on one core, one long prefill, one decode.

Starts `tandem serve` pinned to one core (taskset) with one torch thread, then times
- a prefill of N prompt tokens (/v1/completions with token ids, max_tokens=1), fresh ids each
  repeat so the prefix cache does not help;
- a decode of M tokens after a short prompt (streaming; mean gap between chunks).
and stops the worker.

  python benchmarks/disagg/time_prefill.py MODEL_DIR [--tokens 3000] [--core 0] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tandem.testing.server_process import wait_healthy

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--tokens", type=int, default=3000)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--port", type=int, default=8190)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--worker-arg", action="append", default=[])
    a = p.parse_args()
    url = f"http://127.0.0.1:{a.port}"
    cmd = ["taskset", "-c", str(a.core), sys.executable, "-m", "tandem", "serve", "--model", a.model,
           "--port", str(a.port), "--threads", "1", "--log-level", "warning", *a.worker_arg]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    out = {"command": " ".join(cmd), "tokens": a.tokens}
    try:
        wait_healthy(url, proc, 300)
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        rng = random.Random(0)
        with httpx.Client(timeout=600) as http:
            prefill = []
            for _ in range(a.repeats):
                ids = [rng.randrange(10, 4000) for _ in range(a.tokens)]
                t0 = time.perf_counter()
                r = http.post(url + "/v1/completions", json={"model": model, "prompt": ids, "max_tokens": 1})
                r.raise_for_status()
                prefill.append(time.perf_counter() - t0)
            out["prefill_s"] = prefill
            out["prefill_tokens_per_s"] = a.tokens / min(prefill)
            ids = [rng.randrange(10, 4000) for _ in range(16)]
            times = []
            with http.stream("POST", url + "/v1/completions", json={
                    "model": model, "prompt": ids, "max_tokens": a.decode_tokens, "stream": True,
                    "ignore_eos": True}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        times.append(time.perf_counter())
            gaps = [b - x for x, b in zip(times[1:], times[2:])]
            out["decode_step_ms_mean"] = 1000 * sum(gaps) / max(1, len(gaps))
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
