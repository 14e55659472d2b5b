"""Fairness between tenants at the gateway: a small tenant's p90 TTFT alone and beside a big tenant
sending 10x its tokens (issue 35, item 5's second workload; goal: within 1.5x of alone).

One gateway over `--workers` colocated workers, two tenants (two --api-key values). Each mode
starts its own cluster and measures twice: the small tenant alone, then the same small schedule
with the big tenant beside it. Both tenants send open-loop Poisson arrivals of streamed
completions with distinct random token-id prompts (no prefix hits); the big tenant sends
`--ratio` times the small one's tokens (as many times the requests, same sizes). Modes:
  fair  gateway with the fair queue, workers at capacity at --max-in-flight requests each (give
        the workers --max-num-seqs of --max-in-flight plus its overflow, a quarter of it, with
        --worker-arg: requests wait at the gateway, and the small tenant's, sent over the cap
        while the big one holds more than its share, find a free slot)
  off   today without it: --no-fair-queue, default limits (requests pile onto the workers)
Reported per mode and repetition: small tenant's p50/p90 TTFT alone and with the flood, the ratio
(the figure), both tenants' completed requests and errors (429s). JSON to --out. Not run in CI.
TTFT is the first chunk carrying a token (usage in every chunk counts them), as vLLM's benchmark
counts it; the first chunk with text is reported beside it (`first_text`): a test model with
random weights often starts with tokens that have no text, and each of those is a decode step.

  .venv/bin/python benchmarks/fairness.py --model DIR --workers 1 --max-in-flight 8 \\
      --worker-arg=--max-num-seqs=10 --small-rps 1 --ratio 10 --prompt-tokens 512 \\
      --output-tokens 64 --duration 60 --reps 3 --out bench-results/fairness
  .venv/bin/python benchmarks/fairness.py --smoke     # tiny model, seconds: the script works
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tandem.bench.client import ClientConfig, StreamingClient  # noqa: E402
from tandem.bench.sample import RequestSample  # noqa: E402
from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc  # noqa: E402

KEYS = ("fairness-small", "fairness-big")


@dataclass(frozen=True)
class Setup:
    model: str
    workers: int
    max_in_flight: int
    small_rps: float
    ratio: float
    prompt_tokens: int
    output_tokens: int
    duration_s: float
    worker_args: tuple[str, ...]
    seed: int


def cluster_for(s: Setup, mode: str) -> LocalCluster:
    taken: set[int] = set()
    procs = []
    for i in range(s.workers):
        port = free_port(avoid=taken)
        taken.add(port)
        procs.append(worker_proc(f"w{i}", s.model, "both", "127.0.0.1", port, None,
                                 ("--served-model-name", "m", *s.worker_args)))
    gw = ["--served-model-name", "m", "--no-queue", "--api-key", ",".join(KEYS)]
    gw += ["--max-in-flight", str(s.max_in_flight)] if mode == "fair" else ["--no-fair-queue"]
    port = free_port(avoid=taken)
    g = gateway_proc(s.model, "127.0.0.1", port, procs, "round_robin", tuple(gw))
    return LocalCluster([*procs, ProcSpec("gateway", g.cmd, g.url, None)],
                        cluster_secret=secrets.token_urlsafe(16))


def arrivals(rps: float, duration_s: float, rng: random.Random) -> list[float]:
    out, t = [], rng.expovariate(rps)
    while t < duration_s:
        out.append(t)
        t += rng.expovariate(rps)
    return out


async def tenant(client: StreamingClient, name: str, times: list[float], s: Setup, vocab: int,
                 rng: random.Random, t0: float) -> list[RequestSample]:
    async def one(i: int, at: float) -> RequestSample:
        await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
        prompt = [rng.randrange(10, vocab) for _ in range(s.prompt_tokens)]
        sample = RequestSample(request_id=f"{name}-{i}", tenant=name,
                               expected_prompt_tokens=s.prompt_tokens,
                               expected_output_tokens=s.output_tokens)
        await client.send(client.build_body(s.output_tokens, prompt_ids=prompt), sample, t0)
        return sample
    return list(await asyncio.gather(*(one(i, at) for i, at in enumerate(times))))


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


async def measure(base: str, s: Setup, vocab: int, with_big: bool, rep: int) -> dict:
    rng = random.Random(s.seed + rep)
    small_times = arrivals(s.small_rps, s.duration_s, rng)
    big_times = arrivals(s.small_rps * s.ratio, s.duration_s, rng) if with_big else []
    # usage in every chunk: a chunk whose tokens have no text (a special token) still counts as
    # the first token; the first text is reported beside it
    clients = [StreamingClient(ClientConfig(base, "m", api_key=k, continuous_usage_stats=True))
               for k in KEYS]
    t0 = time.perf_counter() + 0.2
    try:
        small, big = await asyncio.gather(
            tenant(clients[0], "small", small_times, s, vocab, random.Random(rng.random()), t0),
            tenant(clients[1], "big", big_times, s, vocab, random.Random(rng.random()), t0))
    finally:
        for c in clients:
            await c.aclose()
    ttft = [x.ttft for x in small if x.ok and x.ttft is not None]
    text = [x.first_text for x in small if x.ok and x.first_text is not None]
    return {"small_sent": len(small), "small_ok": sum(x.ok for x in small),
            "small_errors": sorted({x.error for x in small if not x.ok})[:5],
            "big_sent": len(big), "big_ok": sum(x.ok for x in big),
            "big_429": sum(x.status == 429 for x in big),
            "small_p50_ttft_s": pct(ttft, 0.5), "small_p90_ttft_s": pct(ttft, 0.9),
            "small_p50_first_text_s": pct(text, 0.5), "small_p90_first_text_s": pct(text, 0.9)}


def run_mode(s: Setup, mode: str, reps: int, vocab: int) -> list[dict]:
    cluster = cluster_for(s, mode)
    out = []
    try:
        cluster.start()
        cluster.wait_ready(300)
        base = cluster.spec("gateway").url
        for rep in range(reps):
            alone = asyncio.run(measure(base, s, vocab, False, rep))
            flood = asyncio.run(measure(base, s, vocab, True, rep))
            a, f = alone["small_p90_ttft_s"], flood["small_p90_ttft_s"]
            out.append({"mode": mode, "rep": rep, "alone": alone, "with_big": flood,
                        "p90_ratio": f / a if a and f else None})
            print(json.dumps(out[-1]), flush=True)
    finally:
        cluster.stop()
    return out


def vocab_of(model: str) -> int:
    """Token ids a prompt may hold: the model's rows, at most the tokenizer's vocabulary (a test
    model's config may declare more rows than its tokenizer has; the server refuses those ids)."""
    cfg = json.loads((Path(model) / "config.json").read_text())
    rows = int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size"))
    tokenizer = Path(model) / "tokenizer.json"
    if tokenizer.exists():
        from tokenizers import Tokenizer
        rows = min(rows, Tokenizer.from_file(str(tokenizer)).get_vocab_size())
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-in-flight", type=int, default=8,
                    help="fair mode: requests per worker before it is at capacity")
    ap.add_argument("--small-rps", type=float, default=1.0)
    ap.add_argument("--ratio", type=float, default=10.0, help="big tenant's tokens / small's")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals per measurement")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="fair,off")
    ap.add_argument("--worker-arg", action="append", default=[], help="passed to every worker")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="directory for results.json")
    ap.add_argument("--smoke", action="store_true", help="tiny model, a few seconds: the script runs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:
            from tandem.testing.tiny_model import write_test_model
            args.model = str(write_test_model(Path(tmp) / "tiny"))
            args.worker_args = ["--kv-cache-memory", "16MiB", "--dtype", "float32", "--device", "cpu"]
            args.duration, args.reps, args.prompt_tokens, args.output_tokens = 2.0, 1, 32, 8
            args.small_rps, args.max_in_flight = 2.0, 2
        if not args.model:
            ap.error("--model DIR is required (or --smoke)")
        s = Setup(args.model, args.workers, args.max_in_flight, args.small_rps, args.ratio,
                  args.prompt_tokens, args.output_tokens, args.duration,
                  tuple(getattr(args, "worker_args", None) or args.worker_arg), args.seed)
        results = [r for mode in args.modes.split(",") for r in run_mode(s, mode, args.reps,
                                                                           vocab_of(args.model))]
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps({"setup": asdict(s), "results": results}, indent=1))
    bad = [r for r in results if r["alone"]["small_ok"] == 0 or r["with_big"]["small_ok"] == 0]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
