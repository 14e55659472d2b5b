"""Where an engine step's time goes on the CPU, and what fraction of the host's measured bfloat16
matrix-product peak it reaches (issue 31, item 2). Not a test.

Peak: the best of `--peak-calls` bfloat16 products of `--peak-size`^3 on this host, both as
torch.matmul and through the oneDNN-packed weight tandem's Linear uses (tandem/layers/linear.py),
in GFLOP/s (2 x M x N x K per product), with the engine's thread count.

Profile: one offline run (tandem.engine.llm.LLM, the offline scheduler) of `--requests` prompts
of `--prompt-tokens` random token ids, `--output-tokens` each (greedy, ignore_eos), after a
warm-up run of the same shape. Every step is timed, and inside it, by wrapping the calls:
  matrix products   every Linear of the layers (q/k/v/o, MLP) and the output head; their FLOPs
                    (2 x rows x in x out) are summed
  attention         tandem.layers.attention.paged_attention (the native kernels, KV writes)
  other layers      the forward's remainder: embeddings, norms, rotary, activations
  sampling          the sampler over the logits
  scheduling        Scheduler.schedule
  input prep        ModelRunner.prepare (block tables, positions)
  engine overhead   the step's remainder: detokenizing, deltas, stop checks, bookkeeping
Output: a table per shape (seconds, share of the step time) and the matrix products' achieved
GFLOP/s against the peak, printed and written to --out as JSON.

  .venv/bin/python benchmarks/step_profile.py --model /tmp/llama24m --out bench-results/step-profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.linear_cpu import fastest_ms  # noqa: E402
from tandem.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig  # noqa: E402
from tandem.engine.llm import LLM  # noqa: E402
from tandem.types import EngineRequest, SamplingParams  # noqa: E402

PARTS = ("matrix products", "attention", "other layers", "sampling", "scheduling", "input prep",
         "engine overhead")


def bf16_peak(size: int, calls: int) -> dict:
    """GFLOP/s of a size^3 bfloat16 product: torch.matmul and the oneDNN-packed linear."""
    a = torch.randn(size, size, dtype=torch.bfloat16)
    b = torch.randn(size, size, dtype=torch.bfloat16)
    flops = 2 * size ** 3
    out = {"size": size, "matmul_gflops": flops / fastest_ms(lambda: torch.matmul(a, b), calls) / 1e6}
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        packed = torch.ops.mkldnn._reorder_linear_weight(b, size)
        run = lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")  # noqa: E731
        out["packed_linear_gflops"] = flops / fastest_ms(run, calls) / 1e6
    out["peak_gflops"] = max(v for k, v in out.items() if k.endswith("gflops"))
    return out


class Timers:
    def __init__(self) -> None:
        self.s: dict[str, float] = defaultdict(float)
        self.flops = 0
        self.active: set[str] = set()   # parts being timed: a part inside itself is counted once

    def wrap(self, owner, name: str, part: str, flops=None):
        """(owner, name, original, timed): `timed` adds each call's time to `part`."""
        original = getattr(owner, name)
        timers = self

        def timed(*args, **kwargs):
            if part in timers.active:
                return original(*args, **kwargs)
            timers.active.add(part)
            t = time.perf_counter()
            try:
                out = original(*args, **kwargs)
            finally:
                timers.s[part] += time.perf_counter() - t
                timers.active.discard(part)
            if flops is not None:
                timers.flops += flops(args, out)
            return out
        return owner, name, original, timed


@contextmanager
def patched(timers: Timers, llm: LLM):
    """The engine's parts wrapped by timers (classes and modules patched, then restored)."""
    import tandem.models.llama as llama
    from tandem.layers.linear import Linear
    engine = llm.engine
    model = engine.runner.model
    # Linear.forward(self, x) -> [rows, out]: 2 x rows x out x in; compute_logits(hidden) likewise
    patches = [timers.wrap(Linear, "forward", "matrix products",
                           lambda args, out: 2 * out.numel() * args[1].shape[-1]),
               timers.wrap(model, "compute_logits", "matrix products",
                           lambda args, out: 2 * out.numel() * args[0].shape[-1]),
               timers.wrap(llama, "paged_attention", "attention"),
               timers.wrap(model, "forward", "forward"),
               timers.wrap(engine.runner.sampler, "sample", "sampling"),
               timers.wrap(engine.scheduler, "schedule", "scheduling"),
               timers.wrap(engine.runner, "prepare", "input prep")]
    for owner, name, _, timed in patches:
        setattr(owner, name, timed)
    try:
        yield
    finally:
        for owner, name, original, _ in patches:
            if isinstance(owner, type) or owner is llama:
                setattr(owner, name, original)
            else:
                delattr(owner, name)   # the instance's own attribute: the class's method again


def profile(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> dict:
    llm.generate(prompts, params)                       # warm-up: same shapes, caches reset below
    llm.engine.kv.pool.reset_cache()
    timers = Timers()
    steps = 0
    with ExitStack() as stack:
        stack.enter_context(patched(timers, llm))
        for rid, p in enumerate(prompts):
            llm.engine.add_request(EngineRequest(f"profile-{rid}", list(p), params))
        t0 = time.perf_counter()
        out_tokens = 0
        while llm.engine.has_work():
            deltas = llm.engine.step()
            steps += 1
            out_tokens += sum(len(d.new_token_ids) for d in deltas)
        total = time.perf_counter() - t0
    # the forward's own remainder: what its layers do besides the products and attention
    inner = timers.s["matrix products"] + timers.s["attention"]
    timers.s["other layers"] = max(0.0, timers.s.pop("forward", 0.0) - inner)
    timers.s["engine overhead"] = max(0.0, total - sum(timers.s[p] for p in PARTS if p != "engine overhead"))
    return {"steps": steps, "seconds": total, "output_tokens": out_tokens,
            "output_tokens_per_s": out_tokens / total,
            "parts_s": {p: timers.s[p] for p in PARTS},
            "parts_share": {p: timers.s[p] / total for p in PARTS},
            "matmul_gflop": timers.flops / 1e9,
            "matmul_gflops_in_products": timers.flops / 1e9 / max(timers.s["matrix products"], 1e-9),
            "matmul_gflops_over_run": timers.flops / 1e9 / total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--shapes", default="decode:64:64:64,prefill:16:1024:8",
                    help="name:requests:prompt tokens:output tokens, comma separated")
    ap.add_argument("--num-blocks", type=int, default=4096)
    ap.add_argument("--peak-size", type=int, default=2048)
    ap.add_argument("--peak-calls", type=int, default=5)
    ap.add_argument("--out", default="bench-results/step-profile.json")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    peak = bf16_peak(a.peak_size, a.peak_calls)
    print(f"bf16 peak ({a.threads} threads, {a.peak_size}^3): {peak}", flush=True)
    cfg = EngineConfig(model=ModelConfig(path=a.model, dtype=a.dtype, show_progress=False),
                       cache=CacheConfig(num_blocks=a.num_blocks), scheduler=SchedulerConfig.offline())
    llm = LLM(cfg)
    vocab = len(json.loads((Path(a.model) / "tokenizer.json").read_text())["model"]["vocab"])
    report = {"threads": a.threads, "dtype": a.dtype, "model": a.model, "peak": peak, "shapes": {}}
    try:
        g = torch.Generator().manual_seed(0)
        for shape in a.shapes.split(","):
            name, n, plen, olen = shape.split(":")
            prompts = torch.randint(10, vocab, (int(n), int(plen)), generator=g).tolist()
            params = SamplingParams(max_tokens=int(olen), temperature=0.0, ignore_eos=True)
            r = profile(llm, prompts, params)
            r["matmul_fraction_of_peak"] = r["matmul_gflops_in_products"] / peak["peak_gflops"]
            report["shapes"][shape] = r
            print(f"\n{shape}: {r['steps']} steps, {r['seconds']:.2f} s, {r['output_tokens_per_s']:.0f} "
                  f"output tokens/s; products {r['matmul_gflops_in_products']:.1f} GFLOP/s = "
                  f"{r['matmul_fraction_of_peak']:.0%} of the peak")
            for p in PARTS:
                print(f"  {p:16} {r['parts_s'][p]:7.3f} s  {r['parts_share'][p]:6.1%}")
    finally:
        llm.shutdown()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
