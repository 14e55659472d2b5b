"""tandem on one GPU against the machine's own limits (run by scripts/gpu-bench.sh).

For Llama-3-8B, Qwen3-30B-A3B and one DeepSeek-V3 layer, random weights at real shapes in bfloat16:
decode step time at batch 1/16/64/256 over 1k and 8k contexts, prefill chunks of 2k and 8k tokens,
each in the variants of tandem_steps.py and as a fraction of its bound (bounds.py, from limits.py),
and transformers' generate at batch 1 as the floor. Cells whose KV does not fit, or past the time
budget, are listed as not measured, with the reason. --smoke: tiny models of the same families,
small batches and contexts (seconds on a CPU; the Triton variants need TRITON_INTERPRET=1 there).

    python -m benchmarks.gpu.gpu_bench --out DIR [--smoke] [--device auto] [--budget-s 420]
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.gpu import limits as machine
from benchmarks.gpu.bounds import ModelCost, decode_bound, prefill_bound
from benchmarks.gpu.hf_floor import hf_decode_seconds
from benchmarks.gpu.report import Cell, write
from benchmarks.gpu.shapes import MODELS, TINY_MODELS
from benchmarks.gpu.tandem_steps import (
    BLOCK_SIZE,
    VARIANTS,
    Variants,
    build_model,
    decode_seconds,
    kv_cache,
    prefill_seconds,
)
from tandem.models.arch import ModelArch
from tandem.models.memory import device_memory, estimate_memory


@dataclass(frozen=True)
class Plan:
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    chunks: tuple[int, ...]
    reps: int
    warmup: int                   # untimed repetitions before (the first call compiles Triton kernels)
    hf_context: int
    hf_tokens: int
    kv_blocks_cpu: int            # the KV cache on a CPU; a GPU's is what its memory leaves


FULL = Plan(batches=(1, 16, 64, 256), contexts=(1024, 8192), chunks=(2048, 8192), reps=10, warmup=2,
            hf_context=1024, hf_tokens=16, kv_blocks_cpu=0)
SMOKE = Plan(batches=(1, 3), contexts=(40,), chunks=(24,), reps=1, warmup=0, hf_context=16, hf_tokens=3,
             kv_blocks_cpu=32)
ACTIVATION_HEADROOM = 4 * 2**30   # GPU memory left beside the KV cache for a step's activations and graphs


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def spent(self) -> str | None:
        return f"the run's time budget ({self.seconds:.0f} s) was spent" if time.monotonic() > self.end else None


def bench_model(name: str, cfg: dict, plan: Plan, lim: machine.Limits, dtype: torch.dtype,
                device: torch.device, budget: Budget) -> list[Cell]:
    cells: list[Cell] = []
    est = estimate_memory(ModelArch.from_config(cfg), dtype)
    if est.weight_bytes > device_memory(device):
        return [Cell(name, "decode", "all", 0, 0, skipped=f"weights do not fit: {est.describe()}")]
    model, arch = build_model(cfg, dtype, device)
    cost = ModelCost.of(arch, dtype)
    variants = Variants(model, arch, dtype, device)
    kv = kv_cache(arch, dtype, device, _kv_blocks(arch, dtype, device, plan))
    gib = kv.numel() * kv.element_size() / 2**30
    # variants innermost: a cell's variants are measured together, whatever the budget leaves
    for batch in plan.batches:
        for ctx in plan.contexts:
            for variant in VARIANTS:
                why = variants.apply(variant) or budget.spent()
                graphs = variant == "triton+graphs"
                secs = None if why else decode_seconds(model, kv, batch, ctx, graphs, plan.reps, plan.warmup)
                if not why and secs is None:
                    need = batch * ctx * cost.kv_bytes_per_token / 2**30
                    why = f"its KV ({need:.1f} GiB) exceeds the {gib:.1f} GiB cache"
                bound = decode_bound(cost, lim, batch, ctx)
                cells.append(Cell(name, "decode", variant, batch, ctx, secs, bound, why))
    for chunk in plan.chunks:
        for variant in VARIANTS[:2]:   # no graph: a prefill chunk's shapes vary
            why = variants.apply(variant) or budget.spent()
            secs = None if why else prefill_seconds(model, kv, chunk, plan.reps, plan.warmup)
            if not why and secs is None:
                why = f"its KV exceeds the {gib:.1f} GiB cache"
            cells.append(Cell(name, "prefill", variant, 1, chunk, secs, prefill_bound(cost, lim, chunk), why))
    del model, variants, kv
    _free(device)
    why = budget.spent()
    secs = None if why else hf_decode_seconds(cfg, dtype, device, plan.hf_context, plan.hf_tokens,
                                              min(plan.reps, 3))
    cells.append(Cell(name, "hf-decode", "transformers", 1, plan.hf_context, secs,
                      decode_bound(cost, lim, 1, plan.hf_context), why))
    _free(device)
    return cells


def _kv_blocks(arch: ModelArch, dtype: torch.dtype, device: torch.device, plan: Plan) -> int:
    if device.type != "cuda":
        return plan.kv_blocks_cpu
    free, _ = torch.cuda.mem_get_info(device)
    per_block = BLOCK_SIZE * ModelCost.of(arch, dtype).kv_bytes_per_token
    return max(1, int((free - ACTIVATION_HEADROOM) * 0.9) // per_block)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="where gpu-bench.json and gpu-bench.md go")
    p.add_argument("--smoke", action="store_true", help="tiny shapes: checks the run end to end in seconds")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu; auto: cuda when available")
    p.add_argument("--budget-s", type=float, default=420.0, help="cells past this many seconds are not measured")
    p.add_argument("--models", nargs="+", choices=tuple(MODELS), default=tuple(MODELS))
    args = p.parse_args(argv)
    device = torch.device(args.device if args.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.smoke:
        raise SystemExit(f"gpu_bench: the full run builds real shapes (tens of GiB) and needs a GPU; {device} "
                         "takes --smoke (tiny shapes)")
    dtype, plan = torch.bfloat16, SMOKE if args.smoke else FULL
    torch.manual_seed(0)
    budget = Budget(args.budget_s)
    lim = machine.measure(device, dtype, args.smoke)
    cells: list[Cell] = []
    for name in args.models:
        cfg = (TINY_MODELS if args.smoke else MODELS)[name]
        cells += bench_model(name, cfg, plan, lim, dtype, device, budget)
        print(f"{name}: {sum(c.seconds is not None for c in cells if c.model == name)} cells measured", flush=True)
    header = {"device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."), "smoke": args.smoke,
              "limits": lim.to_dict()}
    write(args.out, header, cells)
    print(f"wrote {args.out / 'gpu-bench.json'} and {args.out / 'gpu-bench.md'}")


if __name__ == "__main__":
    main()
