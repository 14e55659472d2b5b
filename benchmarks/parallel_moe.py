"""TP 1 vs TP 2 vs EP 2 (all-reduce and all-to-all dispatch) on a small MoE + MLA model (DeepSeek-V3 architecture, random weights):
output tokens/s, weights and resident memory per rank, cold start to ready against the raw
read time of the shards; KV bytes per token of MLA against the dense equivalent.

    .venv/bin/python benchmarks/parallel_moe.py [--requests 8] [--prompt 64] [--output 32]

One torch thread per rank. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import tempfile
import time
from pathlib import Path

import torch

from tandem.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from tandem.engine.engine import Engine
from tandem.models.arch import ModelArch
from tandem.models.memory import count_parameters, kv_bytes_per_token
from tandem.parallel.config import ParallelConfig
from tandem.parallel.launch import parallel_engine
from tandem.testing.tiny_model import write_test_model
from tandem.types import EngineRequest, SamplingParams

SMALL = dict(hidden_size=512, num_layers=6, num_heads=8, intermediate_size=1024, vocab_size=4096,
             dtype="bfloat16",
             extra_config={"n_routed_experts": 32, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
                           "moe_intermediate_size": 256, "n_shared_experts": 1, "first_k_dense_replace": 1,
                           "kv_lora_rank": 128, "q_lora_rank": 192, "qk_nope_head_dim": 64,
                           "qk_rope_head_dim": 32, "v_head_dim": 64})


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(engine: Engine, n: int, prompt: int, output: int) -> float:
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        ids = torch.randint(10, engine.loaded.arch.vocab_size, (prompt,), generator=g).tolist()
        engine.add_request(EngineRequest(f"r{i}", ids, SamplingParams(max_tokens=output, temperature=0.0,
                                                                      ignore_eos=True)))
    start = time.perf_counter()
    produced = 0
    while engine.requests:
        produced += sum(len(d.new_token_ids) for d in engine.step())
    return produced / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--output", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    path = write_test_model(tempfile.mkdtemp(), "DeepseekV3ForCausalLM", seed=0, **SMALL)
    arch = ModelArch.from_dir(path)
    files = sorted(path.glob("*.safetensors"))
    start = time.perf_counter()
    nbytes = sum(len(f.read_bytes()) for f in files)
    raw_read = time.perf_counter() - start
    cfg = EngineConfig(model=ModelConfig(path=str(path), show_progress=False, pack_weights=False),
                       cache=CacheConfig(block_size=16, num_blocks=256),
                       scheduler=SchedulerConfig(max_num_batched_tokens=512), num_threads=1)
    rows = []
    for name, pcfg in (("TP 1", None), ("TP 2", ParallelConfig(tensor_parallel_size=2)),
                       ("EP 2", ParallelConfig(tensor_parallel_size=2, enable_expert_parallel=True)),
                       ("EP 2 all-to-all", ParallelConfig(tensor_parallel_size=2, enable_expert_parallel=True,
                                                          expert_dispatch="alltoall"))):
        t0 = time.perf_counter()
        engine = Engine.from_config(cfg) if pcfg is None else parallel_engine(cfg, pcfg)
        ready = time.perf_counter() - t0
        weights = sum(p.numel() * p.element_size() for p in engine.loaded.model.parameters()) / 2**20
        tps = run(engine, args.requests, args.prompt, args.output)
        rss = [rss_mib(multiprocessing.current_process().pid)] + \
            [rss_mib(c.pid) for c in multiprocessing.active_children()]
        engine.shutdown()
        rows.append((name, tps, weights, rss, ready))
    total, active = count_parameters(arch)
    print(f"model: {total / 1e6:.1f}M parameters ({active / 1e6:.1f}M active), bfloat16, "
          f"{nbytes / 2**20:.1f} MiB of shards read in {raw_read * 1000:.0f} ms (page cache warm)")
    print(f"{args.requests} requests x ({args.prompt} prompt + {args.output} output) tokens, greedy, 1 thread per rank\n")
    print("| layout | output tok/s | weights on rank 0 (MiB) | RSS per rank (MiB) | cold start to ready (s) |")
    print("|---|---|---|---|---|")
    for name, tps, weights, rss, ready in rows:
        print(f"| {name} | {tps:.1f} | {weights:.1f} | {' / '.join(f'{r:.0f}' for r in rss)} | {ready:.2f} |")
    m = arch.mla
    dense = arch.num_layers * arch.num_heads * (m.qk_head_dim + m.v_head_dim) * 2
    print(f"\nKV bytes per token (bfloat16): MLA {kv_bytes_per_token(arch, torch.bfloat16)} vs "
          f"{dense} for the same attention with per-head keys and values")


if __name__ == "__main__":
    main()
