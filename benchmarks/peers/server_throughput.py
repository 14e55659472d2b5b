"""Server throughput side by side: `tandem serve` against vLLM CPU's OpenAI server, on shapes of
concurrent /v1/completions (issue 31, item 2).

Each system is started in turn and warmed up (one round of every shape, discarded: tandem packs
its weights in the background after start-up and vLLM compiles), then measured for --rounds
rounds of every shape; a system's figure for a shape is the median of its rounds. Every round
sends fresh token-id prompts (a seed per round, the same ids for every system), so no prompt hits
a prefix cache. Systems alternate within each repetition (the order reversed on odd ones) and are
restarted per repetition. Figures: output tokens per second and all tokens (prompt + output) per
second, wall-clock over the round. With --contention every system's rounds are measured twice,
quiet and beside `python3 -c 'while True: pass'` pinned to the last core this process may use
(quiet first on even repetitions, busy first on odd ones), and the table gives busy / quiet.
Not run in CI.

Systems: `vllm` (vLLM's own thread binding: on 2 cores it computes on one and reserves the other
for its front end), `vllm-all-cores` (VLLM_CPU_OMP_THREADS_BIND = every core this process may
use, as tandem computes), and NAME=TREE[@FLAGS] for `tandem serve` from a checkout with extra
flags, e.g. `tandem=.` or `tandem-2048=.@--max-num-batched-tokens 2048 --long-prefill-token-threshold 0`.

  .venv/bin/python benchmarks/peers/server_throughput.py --model DIR --system tandem=. --system vllm \\
      --system vllm-all-cores --reps 3 --out bench-results/server-throughput
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from contention import _command, _free_port, _hog, _median, _stop, _wait_ready  # noqa: E402


@dataclass(frozen=True)
class Shape:
    name: str
    requests: int
    prompt_tokens: int
    output_tokens: int

    @classmethod
    def parse(cls, spec: str) -> "Shape":
        name, n, p, o = spec.split(":")
        return cls(name, int(n), int(p), int(o))

    def prompts(self, vocab: int, seed: int) -> list[list[int]]:
        rng = random.Random(seed)
        return [[rng.randrange(10, vocab) for _ in range(self.prompt_tokens)] for _ in range(self.requests)]


@dataclass(frozen=True)
class System:
    name: str
    kind: str                    # "tandem" or "vllm"
    tree: str | None = None
    flags: tuple[str, ...] = ()
    vllm_bind: str | None = None

    @classmethod
    def parse(cls, spec: str) -> "System":
        if spec == "vllm":
            return cls("vllm", "vllm")
        if spec == "vllm-all-cores":
            cores = sorted(os.sched_getaffinity(0))
            return cls(spec, "vllm", vllm_bind=",".join(map(str, cores)))
        name, _, rest = spec.partition("=")
        tree, _, flags = rest.partition("@")
        return cls(name, "tandem", tree or ".", tuple(flags.split()))


@dataclass
class Reading:
    system: str
    shape: str
    rep: int
    round: int
    busy: bool
    prompt_tokens: int
    output_tokens: int
    seconds: float


async def _round(url: str, model: str, shape: Shape, prompts: list[list[int]]) -> tuple[int, int, float]:
    async with httpx.AsyncClient(timeout=600) as client:
        async def one(ids: list[int]) -> tuple[int, int]:
            r = await client.post(f"{url}/v1/completions", json={
                "model": model, "prompt": ids, "max_tokens": shape.output_tokens, "temperature": 0,
                "ignore_eos": True})
            r.raise_for_status()
            usage = r.json()["usage"]
            return usage["prompt_tokens"], usage["completion_tokens"]
        start = time.perf_counter()
        counts = await asyncio.gather(*(one(p) for p in prompts))
        return sum(c[0] for c in counts), sum(c[1] for c in counts), time.perf_counter() - start


def run_system(system: System, args: argparse.Namespace, rep: int, shapes: list[Shape],
               vocab: int) -> list[Reading]:
    port = _free_port()
    cmd, env = _command(system.kind, system.tree, args.model, port, args.dtype, args.threads,
                        system.flags, system.vllm_bind)
    log = open(Path(args.out) / f"{system.name}-{rep}.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    readings = []
    try:
        _wait_ready(url, proc, args.start_timeout)
        served = httpx.get(f"{url}/v1/models", timeout=5).json()["data"][0]["id"]
        for i, shape in enumerate(shapes):   # warm-up: seeds no measured round uses
            asyncio.run(_round(url, served, shape, shape.prompts(vocab, seed=-1 - i)))
        states = ((False, True) if rep % 2 == 0 else (True, False)) if args.contention else (False,)
        for busy in states:
            hog = _hog(sorted(os.sched_getaffinity(0))[-1]) if busy else None
            try:
                for r in range(args.rounds):
                    for i, shape in enumerate(shapes):
                        # the same ids for every system; other ids busy than quiet
                        seed = ((rep * 2 + busy) * args.rounds + r) * len(shapes) + i
                        p, o, s = asyncio.run(_round(url, served, shape, shape.prompts(vocab, seed)))
                        readings.append(Reading(system.name, shape.name, rep, r, busy, p, o, s))
                        print(f"{system.name} rep {rep} round {r}{' busy' if busy else ''} {shape.name}: "
                              f"{o / s:.0f} output tokens/s, {(p + o) / s:.0f} tokens/s", flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    finally:
        _stop(proc)
        log.close()
    return readings


def report(readings: list[Reading], shapes: list[Shape], baseline: str | None) -> str:
    quiet = [r for r in readings if not r.busy]
    busy = [r for r in readings if r.busy]
    out = _table(quiet, shapes, baseline)
    if busy:
        out += "\nOne core busy:\n\n" + _table(busy, shapes, baseline) + "\n" + _busy_ratios(readings, shapes)
    return out


def _rep_medians(rs: list[Reading], all_tokens: bool = False) -> list[float]:
    return [_median([(r.prompt_tokens * all_tokens + r.output_tokens) / r.seconds for r in rs if r.rep == k])
            for k in sorted({r.rep for r in rs})]


def _busy_ratios(readings: list[Reading], shapes: list[Shape]) -> str:
    names = list(dict.fromkeys(r.system for r in readings))
    lines = ["| system | " + " | ".join(f"{s.name}: busy / quiet (reps)" for s in shapes) + " |",
             "|---|" + "---:|" * len(shapes)]
    for n in names:
        cells = []
        for shape in shapes:
            mine = [r for r in readings if r.system == n and r.shape == shape.name]
            ratios = [b / q for q, b in zip(_rep_medians([r for r in mine if not r.busy]),
                                            _rep_medians([r for r in mine if r.busy]))]
            cells.append(f"x{_median(ratios):.2f} ({' / '.join(f'{x:.2f}' for x in ratios)})")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _table(readings: list[Reading], shapes: list[Shape], baseline: str | None) -> str:
    names = list(dict.fromkeys(r.system for r in readings))
    lines = []
    for shape in shapes:
        lines += [f"**{shape.name}**: {shape.requests} concurrent, {shape.prompt_tokens}-token prompts, "
                  f"{shape.output_tokens} output tokens", "",
                  "| system | output tokens/s (median of reps) | all tokens/s (median) | reps' medians |"
                  + (f" x {baseline} |" if baseline else ""),
                  "|---|---:|---:|---:|" + ("---:|" if baseline else "")]
        med, per_rep = {}, {}
        for n in names:
            rs = [r for r in readings if r.system == n and r.shape == shape.name]
            per_rep[n] = _rep_medians(rs)
            med[n] = (_median(per_rep[n]), _median(_rep_medians(rs, all_tokens=True)))
        for n in names:
            row = (f"| {n} | {med[n][0]:.0f} | {med[n][1]:.0f} | "
                   f"{' / '.join(f'{x:.0f}' for x in per_rep[n])} |")
            if baseline:
                row += f" x{med[n][0] / med[baseline][0]:.2f} |" if baseline in med else " |"
            lines.append(row)
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--system", action="append", required=True,
                   help="vllm, vllm-all-cores, or NAME=TREE[@FLAGS] for `tandem serve`; repeatable")
    p.add_argument("--shape", action="append", default=None, metavar="NAME:REQUESTS:PROMPT:OUTPUT",
                   help="default: decode:64:64:128 and prefill:16:1024:8")
    p.add_argument("--baseline", default="vllm", help="the system the ratios are against")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--contention", action="store_true",
                   help="measure every system quiet and with one other process busy on the last core")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--start-timeout", type=float, default=600)
    p.add_argument("--out", default="bench-results/server-throughput")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    shapes = [Shape.parse(s) for s in (args.shape or ["decode:64:64:128", "prefill:16:1024:8"])]
    systems = [System.parse(s) for s in args.system]
    # prompt ids from the tokenizer's vocabulary (a test model's config may declare more rows)
    vocab = min(json.loads((Path(args.model) / "config.json").read_text())["vocab_size"],
                len(json.loads((Path(args.model) / "tokenizer.json").read_text())["model"]["vocab"]))
    readings: list[Reading] = []
    for rep in range(args.reps):
        for system in (systems if rep % 2 == 0 else systems[::-1]):
            readings += run_system(system, args, rep, shapes, vocab)
    table = report(readings, shapes, args.baseline if any(s.name == args.baseline for s in systems) else None)
    print(table)
    (Path(args.out) / "server_throughput.md").write_text(table)
    (Path(args.out) / "server_throughput.json").write_text(json.dumps(
        {"model": args.model, "dtype": args.dtype, "threads": args.threads, "rounds": args.rounds,
         "shapes": [asdict(s) for s in shapes], "systems": [asdict(s) for s in systems],
         "readings": [asdict(r) for r in readings]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
