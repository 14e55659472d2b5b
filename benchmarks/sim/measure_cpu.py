"""Measure this CPU for the fleet simulator's calibration (tandem/sim/calibrate.py).

One tandem engine in this process (one torch thread, the model's dtype, tandem's default
scheduler: 512-token steps, 256-token chunk cap, 16-token blocks, 512 MiB of KV), two parts:
1. fit points: steps of known composition, each timed alone: single prompts of 128-2048 fresh
   tokens (chunks of 512 at growing context), and batches of 1-16 streams decoding at contexts
   of ~64 and ~1,000 tokens;
   and mixed steps (4-16 streams decoding while a 512-1,024-token prompt is chunked beside them);
2. a validation run, open loop in real time: agent-like sessions (a shared system prompt, each
   turn resending the previous prompt plus an answer and a new tool result), Poisson arrivals;
   per request its arrival, first-token time and every token's time (taken when the step that
   produced it returned).
Writes JSON for `tandem sim --calibrate FILE`.

    taskset -c 0 .venv/bin/python benchmarks/sim/measure_cpu.py --model /tmp/disagg/llama512 \
        --out benchmarks/sim/results/cpu_measured.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from tandem.config import EngineConfig, ModelConfig
from tandem.engine.engine import Engine
from tandem.kv.block_hash import hash_request_blocks
from tandem.types import EngineRequest, SamplingParams

BLOCK = 16


def _params(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10, 4000) for _ in range(n)]


def fit_points(engine: Engine, rng: random.Random, reps: int) -> list[dict]:
    """Steps of known composition: [(new_tokens, context_before), ...], sampled, seconds."""
    points = []
    for _ in range(reps):
        for length in (128, 256, 512, 1024, 2048):
            engine.add_request(EngineRequest(f"p{rng.random()}", _tokens(rng, length), _params(1)))
            done = 0
            while engine.has_work():
                t = time.perf_counter()
                engine.step()
                dt = time.perf_counter() - t
                n = min(512, length - done)
                points.append({"seqs": [[n, done]], "sampled": int(done + n >= length), "seconds": dt})
                done += n
        for batch, prompt in ((1, 64), (4, 64), (8, 64), (16, 64), (1, 1000), (4, 1000), (8, 1000)):
            ids = [f"d{rng.random()}" for _ in range(batch)]
            for rid in ids:
                engine.add_request(EngineRequest(rid, _tokens(rng, prompt), _params(12)))
            started: set[str] = set()
            produced = {rid: 0 for rid in ids}
            while engine.has_work():
                decoding = len(started) == batch
                ctx = [prompt + produced[r] - 1 for r in ids]
                t = time.perf_counter()
                deltas = engine.step()
                dt = time.perf_counter() - t
                for d in deltas:
                    if d.new_token_ids:
                        started.add(d.request_id)
                        produced[d.request_id] += len(d.new_token_ids)
                if decoding and len(deltas) == batch:
                    points.append({"seqs": [[1, c] for c in ctx], "sampled": batch, "seconds": dt})
        for batch, length in ((4, 1024), (8, 1024), (16, 512)):   # mixed steps: streams + a prompt's chunks
            ids = [f"m{rng.random()}" for _ in range(batch)]
            for rid in ids:
                engine.add_request(EngineRequest(rid, _tokens(rng, 64), _params(40)))
            produced = {rid: 0 for rid in ids}
            while min(produced.values()) == 0:
                for d in engine.step():
                    produced[d.request_id] += len(d.new_token_ids)
            long_id = f"L{rng.random()}"
            engine.add_request(EngineRequest(long_id, _tokens(rng, length), _params(1)))
            done = 0
            while done < length:
                n = min(length - done, 512 - batch)
                seqs = [[1, 64 + produced[r] - 1] for r in ids] + [[n, done]]
                t = time.perf_counter()
                deltas = engine.step()
                dt = time.perf_counter() - t
                for d in deltas:
                    if d.request_id in produced:
                        produced[d.request_id] += len(d.new_token_ids)
                points.append({"seqs": seqs, "sampled": batch + int(done + n >= length), "seconds": dt})
                done += n
            while engine.has_work():
                engine.step()
    return points


def workload(rng: random.Random, sessions: int, turns: int, rate: float) -> list[dict]:
    system = _tokens(rng, 200)
    convs = [system + _tokens(rng, 60) for _ in range(sessions)]
    reqs, t = [], 0.0
    order = [(s, k) for k in range(turns) for s in range(sessions)]
    for s, k in order:
        if k > 0:
            convs[s] = convs[s] + _tokens(rng, 24) + _tokens(rng, rng.randint(50, 150))  # answer + tool result
        prompt = list(convs[s])
        hashes = hash_request_blocks(prompt, BLOCK)
        reqs.append({"id": f"s{s}t{k}", "session": f"s{s}", "arrival": round(t, 4), "prompt": prompt,
                     "prompt_tokens": len(prompt), "output_tokens": rng.randint(16, 32),
                     "hash_ids": [h & ((1 << 62) - 1) for h in hashes] + [-(len(reqs) + 1)]})
        t += rng.expovariate(rate)
    return reqs


def validation_run(engine: Engine, reqs: list[dict]) -> list[dict]:
    pending = list(reqs)
    out = {r["id"]: {"first": None, "tokens": []} for r in reqs}
    t0 = time.perf_counter()
    while pending or engine.has_work():
        now = time.perf_counter() - t0
        while pending and pending[0]["arrival"] <= now:
            r = pending.pop(0)
            engine.add_request(EngineRequest(r["id"], r["prompt"], _params(r["output_tokens"])))
        if engine.has_work():
            deltas = engine.step()
            t = time.perf_counter() - t0
            for d in deltas:
                if d.new_token_ids:
                    out[d.request_id]["tokens"].extend([t] * len(d.new_token_ids))
        elif pending:
            time.sleep(min(0.005, max(0.0, pending[0]["arrival"] - now)))
    return [{"id": r["id"], "token_times": out[r["id"]]["tokens"]} for r in reqs]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--sessions", type=int, default=6)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--rate", type=float, default=0.4, help="requests per second (Poisson)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    engine = Engine.from_config(EngineConfig(model=ModelConfig(a.model, show_progress=False), num_threads=1))
    engine.loaded.wait_packed()
    rng = random.Random(a.seed)
    engine.add_request(EngineRequest("warmup", _tokens(rng, 600), _params(4)))
    while engine.has_work():
        engine.step()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    points = fit_points(engine, rng, a.reps)
    reqs = workload(rng, a.sessions, a.turns, a.rate)
    measured = validation_run(engine, reqs)
    engine.shutdown()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {"meta": {"started": started, "cpu": cpu, "nproc": len(__import__("os").sched_getaffinity(0)),
                    "load_average": list(__import__("os").getloadavg()), "commit": commit,
                    "model": a.model, "command": " ".join(__import__("sys").argv)},
           "model": Path(a.model).name, "block_size": BLOCK, "kv_cache_bytes": 512 * 2**20,
           "fit_points": points,
           "validation": [{k: v for k, v in r.items() if k != "prompt"} | m for r, m in zip(reqs, measured)]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc))
    print(f"{len(points)} fit points, {len(reqs)} validation requests -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
