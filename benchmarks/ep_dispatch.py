"""What expert parallelism's combine costs: one MoE layer on 2 ranks (gloo, one thread each),
all-reduce (every rank routes all tokens, one all-reduce of [T, hidden]) against all-to-all
dispatch and combine (each rank routes its T/2 tokens; counts, rows out, rows back, all-gather),
at several token counts; plus the bare collectives of each, to separate compute from exchange.

The layer is benchmarks/parallel_moe.py's MoE layer shape (hidden 512, 32 experts of 256, top 4
in 4 groups of which 2, one shared expert), random bfloat16 weights, the same on every rank.

    .venv/bin/python benchmarks/ep_dispatch.py [--tokens 1,8,64,512] [--iters 50]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tandem

from tandem.layers.mlp import GatedMLP  # noqa: E402
from tandem.layers.moe import SparseMoE  # noqa: E402
from tandem.layers.moe_spec import MoESpec  # noqa: E402
from tandem.parallel.config import ParallelConfig  # noqa: E402
from tandem.parallel.expert_dispatch import AllToAllDispatch  # noqa: E402
from tandem.parallel.group import close_group, init_group  # noqa: E402

HIDDEN = 512
SPEC = MoESpec(num_experts=32, top_k=4, expert_intermediate_size=256, scoring="sigmoid", num_groups=4,
               topk_groups=2, scaling=2.5, correction_bias=True, num_shared_experts=1)


def _layer(rank: int, mode: str) -> SparseMoE:
    """Rank `rank`'s half of the experts; weights drawn per name from one seed, equal on all ranks."""
    per = SPEC.num_experts // 2
    moe = SparseMoE(HIDDEN, SPEC, local_experts=range(rank * per, (rank + 1) * per))
    if mode == "allreduce":   # the shared expert sliced over the ranks, as tandem.parallel.shard does
        moe.shared_experts = GatedMLP(HIDDEN, SPEC.expert_intermediate_size * SPEC.num_shared_experts // 2)
    full = SparseMoE(HIDDEN, SPEC)      # the whole layer, for the same values on every rank
    g = torch.Generator().manual_seed(0)
    for name, p in full.named_parameters():
        p.data = torch.randn(p.shape, generator=g).mul_(0.05).to(torch.bfloat16)
    full.gate.e_score_correction_bias.data = full.gate.e_score_correction_bias.data.float()
    mine = dict(moe.named_parameters())
    for name, p in full.named_parameters():
        if name not in mine:
            continue
        if mine[name].shape != p.shape:     # the shared expert sliced over 2 ranks (all-reduce mode)
            dim = 0 if "down_proj" not in name else 1
            p = p.chunk(2, dim=dim)[rank]
        mine[name].data = p.data.clone()
    return moe


def _time(fn, iters: int) -> float:
    fn()
    samples = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def _rank(rank: int, port: int, tokens: list[int], iters: int, out) -> None:
    torch.set_num_threads(1)
    g = init_group(ParallelConfig(tensor_parallel_size=2, enable_expert_parallel=True), rank, port,
                   torch.device("cpu"))
    layers = {}
    for mode in ("allreduce", "alltoall"):
        moe = _layer(rank, mode)
        if mode == "allreduce":
            moe.reduce = g.all_reduce
        else:
            moe.dispatch = AllToAllDispatch(g, SPEC.num_experts // 2)
        layers[mode] = moe
    rows = []
    with torch.inference_mode():
        for T in tokens:
            x = torch.randn((T, HIDDEN), generator=torch.Generator().manual_seed(T)).to(torch.bfloat16)
            ys = {m: layers[m](x) for m in layers}
            same = torch.allclose(ys["allreduce"].float(), ys["alltoall"].float(), atol=2e-2, rtol=2e-2)
            times = {m: _time(lambda m=m: layers[m](x), iters) for m in layers}
            buf = x.clone()
            times["bare all-reduce"] = _time(lambda: dist.all_reduce(buf), iters)
            half = x[:-(-T // 2)].clone()
            bufs = [torch.empty_like(half) for _ in range(2)]
            counts, got = torch.tensor([1, 1]), torch.empty(2, dtype=torch.int64)
            times["bare a2a x3 + all-gather"] = _time(lambda: (
                dist.all_to_all_single(got, counts), dist.all_to_all_single(torch.empty_like(half), half),
                dist.all_to_all_single(torch.empty_like(half), half), dist.all_gather(bufs, half)), iters)
            rows.append((T, times, same))
    if rank == 0:
        out.put(rows)
    close_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,8,64,512")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, tokens, args.iters, q)) for r in range(2)]
    for p in procs:
        p.start()
    rows = q.get(timeout=600)
    for p in procs:
        p.join()
    print("ms per MoE layer forward, median of", args.iters, "(2 ranks, gloo, 1 thread each)\n")
    print("| tokens | all-reduce | all-to-all | bare all-reduce | bare 3 all-to-all + all-gather | outputs agree |")
    print("|---|---|---|---|---|---|")
    for T, t, same in rows:
        print(f"| {T} | {t['allreduce']:.2f} | {t['alltoall']:.2f} | {t['bare all-reduce']:.2f} | "
              f"{t['bare a2a x3 + all-gather']:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
