"""Micro-benchmark: bfloat16 F.linear against the oneDNN-packed weight of tandem.layers.linear
(not a test). Shapes default to the ~125M Llama of `tandem bench engine` (hidden 768, MLP 2048,
4 KV heads of 64, vocabulary 32000). Prints the fastest of N calls for each, and the speedup.

  .venv/bin/python benchmarks/linear_cpu.py [--threads 1] [--rows 1,16,64,512,2048]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from tandem.layers.linear import Linear, can_pack


def fastest_ms(fn, calls: int) -> float:
    fn()
    best = float("inf")
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", default="1,16,64,512,2048")
    p.add_argument("--shapes", default="2048x768,768x2048,768x768,256x768,32000x768",
                   help="OUTxIN weight shapes")
    args = p.parse_args()
    if not can_pack(torch.bfloat16, torch.device("cpu")):
        raise SystemExit("this torch has no oneDNN ops: nothing to compare")
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s); fastest call in ms")
    print("| weight | rows | F.linear | packed | speedup |\n|---|---:|---:|---:|---:|")
    with torch.inference_mode():
        for shape in args.shapes.split(","):
            n_out, n_in = (int(v) for v in shape.split("x"))
            layer = Linear(n_in, n_out, bias=False)
            layer.weight = torch.nn.Parameter(torch.randn(n_out, n_in).to(torch.bfloat16), requires_grad=False)
            weight = layer.weight.detach()
            layer.pack()
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, n_in).to(torch.bfloat16)
                calls = 50 if rows < 512 else 10
                plain = fastest_ms(lambda: F.linear(x, weight), calls)
                packed = fastest_ms(lambda: layer(x), calls)
                print(f"| {shape} | {rows} | {plain:.3f} | {packed:.3f} | {plain / packed:.2f}x |")


if __name__ == "__main__":
    main()
