"""Time of one `Sampler.sample` call on the CPU, per sampling setting, against greedy argmax
measured in the same run (the baseline: the least a sampler can do).

Rows carry agentic-sized prompts (for the repetition penalty) and a 152k vocabulary (Qwen's) by
default. Logits are drawn peaked (a scaled normal), as a trained model's are, so top-p cuts
within a few hundred tokens. Settings alternate repetition by repetition; the median is reported.

  taskset -c 0 python benchmarks/sampler_cpu.py [--rows 16] [--vocab 151936] [--prompt-tokens 20000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch

from tandem.runner import sampler as sampler_module
from tandem.runner.sampler import Sampler, SamplingRow
from tandem.types import SamplingParams

SETTINGS = {
    "greedy": SamplingParams(temperature=0.0),
    "temperature 1.0": SamplingParams(temperature=1.0, seed=1),
    "top_p 0.9": SamplingParams(temperature=0.8, top_p=0.9, seed=1),
    "qwen defaults (t 0.7, top_p 0.8, top_k 20, repetition 1.05)":
        SamplingParams(temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05, seed=1),
    "presence + frequency 0.5": SamplingParams(temperature=0.7, presence_penalty=0.5,
                                               frequency_penalty=0.5, seed=1),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--prompt-tokens", type=int, default=20000)
    ap.add_argument("--output-tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(a.rows, a.vocab, generator=g) * 4
    prompts = [torch.randint(0, a.vocab, (a.prompt_tokens,), generator=g).tolist() for _ in range(a.rows)]
    outputs = [torch.randint(0, a.vocab, (a.output_tokens,), generator=g).tolist() for _ in range(a.rows)]
    sampler = Sampler()
    rows_of = {}
    for name, params in SETTINGS.items():
        rows = [SamplingRow(params=params, output_token_ids=o, prompt_token_ids=p) for p, o in zip(prompts, outputs)]
        # the model runner caches each request's distinct prompt ids (older trees have no such field)
        if params.repetition_penalty != 1.0 and hasattr(sampler_module, "distinct_ids"):
            rows = [dataclasses.replace(r, prompt_ids=sampler_module.distinct_ids(r.prompt_token_ids, "cpu"))
                    for r in rows]
        rows_of[name] = rows
        sampler.sample(logits, rows)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(a.repeats):
        for name, rows in rows_of.items():
            t = time.perf_counter()
            sampler.sample(logits, rows)
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["greedy"])
    result = {name: {"ms": round(statistics.median(ts) * 1e3, 2), "x_greedy": round(statistics.median(ts) / base, 1)}
              for name, ts in times.items()}
    print(json.dumps({"rows": a.rows, "vocab": a.vocab, "prompt_tokens": a.prompt_tokens,
                      "threads": a.threads, "results": result}, indent=2))


if __name__ == "__main__":
    main()
