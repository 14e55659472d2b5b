"""Decode step time and KV capacity with the model's dtype in the KV cache against fp8 e5m2 (not a test).

Two engines on the same checkpoint in one process, one per `--kv-cache-dtype`, each given the same
KV memory. Each holds `--seqs` sequences of `--context` random prompt tokens (prefilled first, not
timed, distinct per engine so that nothing is shared) and then decodes; decode steps are timed in
rounds that alternate between the engines, so that other load on the host hits both alike.
Prints the median step time per engine and the ratio, and the number of KV blocks each budget holds.

  taskset -c 0 .venv/bin/python benchmarks/kv_cache_dtype.py --model DIR [--dtype bfloat16] \\
      [--seqs 5] [--context 4000] [--short 2] [--rounds 8] [--steps 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tandem.config import CacheConfig, EngineConfig, ModelConfig
from tandem.engine.engine import Engine
from tandem.types import EngineRequest, SamplingParams

KV_DTYPES = ("auto", "fp8_e5m2")


def make_engine(args: argparse.Namespace, kv_dtype: str) -> Engine:
    return Engine.from_config(EngineConfig(
        ModelConfig(args.model, dtype=args.dtype, show_progress=False),
        CacheConfig(kv_cache_bytes=args.kv_cache_mib * 2**20, kv_cache_dtype=kv_dtype),
        num_threads=args.threads))


def fill(engine: Engine, args: argparse.Namespace, seed: int) -> None:
    """Admit the long and short sequences and step until every one of them is decoding."""
    g = torch.Generator().manual_seed(seed)
    vocab = engine.loaded.arch.vocab_size
    lengths = [args.context] * args.seqs + [60] * args.short
    for i, n in enumerate(lengths):
        ids = torch.randint(5, vocab - 1, (n,), generator=g).tolist()
        sampling = SamplingParams(max_tokens=1_000_000, temperature=0.0, ignore_eos=True)
        engine.add_request(EngineRequest(f"s{seed}-{i}", ids, sampling))
    while not (len(engine.scheduler.running) == len(lengths)
               and all(r.output_token_ids for r in engine.scheduler.running)):
        engine.step()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--kv-cache-mib", type=int, default=1024)
    p.add_argument("--seqs", type=int, default=5, help="long sequences decoding at once")
    p.add_argument("--context", type=int, default=4000, help="prompt tokens of each long sequence")
    p.add_argument("--short", type=int, default=2, help="60-token sequences decoding alongside")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--steps", type=int, default=8, help="decode steps per engine per round")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    engines = {kv: make_engine(args, kv) for kv in KV_DTYPES}
    for seed, engine in enumerate(engines.values()):
        fill(engine, args, seed)
    times: dict[str, list[float]] = {kv: [] for kv in KV_DTYPES}
    for _ in range(args.rounds):
        for kv, engine in engines.items():
            for _ in range(args.steps):
                t = time.perf_counter()
                engine.step()
                times[kv].append(time.perf_counter() - t)
    med = {kv: statistics.median(ts) * 1e3 for kv, ts in times.items()}
    cache_dtypes = {kv: e.layout.dtype for kv, e in engines.items()}
    print(f"model {args.model} ({engines['auto'].loaded.dtype}), {args.seqs} x {args.context} + "
          f"{args.short} x 60 positions decoding, {args.threads} thread(s), {args.kv_cache_mib} MiB of KV memory")
    print("| kv cache dtype | stored as | KV blocks in the budget | decode step ms (median) | ratio |")
    print("|---|---|---:|---:|---:|")
    for kv, engine in engines.items():
        print(f"| {kv} | {cache_dtypes[kv]} | {engine.num_blocks} | {med[kv]:.1f} | "
              f"x{med[kv] / med['auto']:.2f} |")
    for engine in engines.values():
        engine.shutdown()


if __name__ == "__main__":
    main()
