"""End-to-end CPU numbers for a ~100M-parameter Llama-shaped model (not a test).

Measures: load time (mmapped safetensors), prefill time, decode step time at batch 1 and 8,
and separate vs fused q/k/v and gate/up projections at the same shapes (the fusion question).

  .venv/bin/python benchmarks/model_cpu.py [--threads 1] [--dtype float32] [--dir /tmp/tandem-bench-100m]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from tandem.config import ModelConfig
from tandem.models.loader import load_model
from tandem.testing.paged_driver import PagedDriver
from tandem.testing.tiny_model import write_test_model

SHAPE = dict(hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=4, intermediate_size=2048,
             vocab_size=32000, max_position_embeddings=4096)


def timed(fn, n: int) -> float:
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3  # ms


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--dir", default="/tmp/tandem-bench-100m")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    path = Path(args.dir) / args.dtype
    if not (path / "config.json").exists():
        write_test_model(path, dtype=args.dtype, **SHAPE)
    t = time.perf_counter()
    loaded = load_model(ModelConfig(path=str(path), show_progress=False))
    load_s = time.perf_counter() - t
    nparams = sum(p.numel() for p in loaded.model.parameters())
    print(f"threads={args.threads} dtype={args.dtype} params={nparams / 1e6:.1f}M load={load_s * 1e3:.0f} ms")

    a = loaded.arch
    gen = torch.Generator().manual_seed(0)
    for batch, ctx in [(1, 512), (8, 512)]:
        driver = PagedDriver(loaded.model, a.num_layers, a.num_kv_heads, a.head_dim, loaded.dtype,
                             block_size=16, num_blocks=batch * (ctx // 16 + 8) + 4)
        prompts = {f"s{i}": torch.randint(0, a.vocab_size, (ctx,), generator=gen).tolist() for i in range(batch)}
        t = time.perf_counter()
        for sid, toks in prompts.items():
            driver.step([(sid, toks)])
        prefill_ms = (time.perf_counter() - t) * 1e3 / batch
        step = [(sid, [1]) for sid in prompts]
        decode_ms = timed(lambda: driver.step(step), 20)
        print(f"batch={batch} ctx={ctx}: prefill {prefill_ms:.0f} ms/seq ({ctx * 1e3 / prefill_ms:.0f} tok/s), "
              f"decode step {decode_ms:.1f} ms ({batch * 1e3 / decode_ms:.0f} tok/s)")

    h, qd, kvd, inter = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim, a.intermediate_size
    w = {n: torch.randn(o, h, dtype=loaded.dtype) * 0.02 for n, o in
         [("q", qd), ("k", kvd), ("v", kvd), ("gate", inter), ("up", inter)]}
    qkv, gate_up = torch.cat([w["q"], w["k"], w["v"]]), torch.cat([w["gate"], w["up"]])
    for T in (1, 8, 256):
        x = torch.randn(T, h, dtype=loaded.dtype)
        sep = timed(lambda: (F.linear(x, w["q"]), F.linear(x, w["k"]), F.linear(x, w["v"])), 50)
        fused = timed(lambda: F.linear(x, qkv).split([qd, kvd, kvd], -1), 50)
        sep_mlp = timed(lambda: F.silu(F.linear(x, w["gate"])) * F.linear(x, w["up"]), 50)
        fused_mlp = timed(lambda: (lambda g, u: F.silu(g) * u)(*F.linear(x, gate_up).chunk(2, -1)), 50)
        print(f"T={T}: q/k/v separate {sep * 1e3:.0f} us, fused {fused * 1e3:.0f} us; "
              f"gate/up separate {sep_mlp * 1e3:.0f} us, fused {fused_mlp * 1e3:.0f} us")


if __name__ == "__main__":
    main()
