"""KV pull throughput per transport kind: a prefill process offers blocks, this process pulls them.

    PYTHONPATH=. .venv/bin/python benchmarks/kv_transfer.py [--blocks 64] [--block-kib 256] [--pulls 20] [--kinds tcp,shm,mooncake]

Prints MiB/s (median and best over the pulls; each pull = read + confirm round trip) per kind,
and the baseline measured in the same run: the same blocks copied within one process (index_copy_
between two KV tensors), the most a transport between two processes could reach.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig, allocate_kv, make_transport
from tandem.types import KVHandle


def bench_layout(block_kib: int) -> KVLayout:
    # float32 block = num_layers * 2 * block_size * heads * head_dim * 4 bytes; 4*2*16*8*64*4 = 256 KiB
    return KVLayout(model="bench", dtype="float32", block_size=16 * block_kib // 256, num_layers=4,
                    num_kv_heads=8, head_dim=64)


def prefill_main(conn, kind: str, layout_d: dict, num_blocks: int, pulls: int) -> None:
    torch.set_num_threads(1)
    layout = KVLayout.from_dict(layout_d)
    kv = allocate_kv(layout, num_blocks, kind)
    kv.copy_(torch.randn(kv.shape))
    t = make_transport(kind, kv, layout, TransferConfig(pin_timeout_s=300))
    t.source.start()
    for i in range(pulls + 1):
        t.source.offer(f"r{i}", list(range(num_blocks)))
    conn.send(t.source.address)
    conn.recv()            # the benchmark is done
    t.close()


def run(kind: str, blocks: int, block_kib: int, pulls: int) -> dict:
    ctx = mp.get_context("spawn")
    layout = bench_layout(block_kib)
    conn, child = ctx.Pipe()
    proc = ctx.Process(target=prefill_main, args=(child, kind, layout.to_dict(), blocks, pulls), daemon=True)
    proc.start()
    try:
        if not conn.poll(120):
            raise RuntimeError("prefill process did not start")
        addr = conn.recv()
        kv = allocate_kv(layout, blocks, kind)
        t = make_transport(kind, kv, layout, TransferConfig())
        mib = blocks * layout.block_nbytes / 2**20
        dst = list(reversed(range(blocks)))     # different ids on the decode side
        times = []
        for i in range(pulls + 1):              # pull 0 warms up connections and mappings
            h = KVHandle(addr, f"r{i}", tuple(range(blocks)), blocks * layout.block_size, layout.to_dict(),
                         transport=kind)
            t0 = time.perf_counter()
            t.sink.pull(h, dst)
            times.append(time.perf_counter() - t0)
        t.close()
        steady = times[1:]
        return {"kind": kind, "MiB": mib, "first_ms": times[0] * 1e3,
                "median_MiBps": mib / statistics.median(steady), "best_MiBps": mib / min(steady)}
    finally:
        conn.send("done")
        proc.join(30)
        if proc.is_alive():
            proc.kill()


def local_copy(blocks: int, block_kib: int, pulls: int) -> dict:
    """Baseline: the same blocks copied between two KV tensors of one process."""
    layout = bench_layout(block_kib)
    src, dst = (layout.allocate(blocks) for _ in range(2))
    src.fill_(1.0)
    ids = torch.tensor(list(reversed(range(blocks))))
    mib = blocks * layout.block_nbytes / 2**20
    times = []
    for _ in range(pulls + 1):
        t0 = time.perf_counter()
        dst.index_copy_(0, ids, src)
        times.append(time.perf_counter() - t0)
    steady = times[1:]
    return {"kind": "local copy", "MiB": mib, "first_ms": times[0] * 1e3,
            "median_MiBps": mib / statistics.median(steady), "best_MiBps": mib / min(steady)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--block-kib", type=int, default=256)
    ap.add_argument("--pulls", type=int, default=20)
    ap.add_argument("--kinds", default="tcp,shm,mooncake")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [local_copy(args.blocks, args.block_kib, args.pulls)]
    rows += [run(k, args.blocks, args.block_kib, args.pulls) for k in args.kinds.split(",")]
    base = rows[0]["median_MiBps"]
    print(f"{'kind':<12}{'MiB/pull':>10}{'first ms':>10}{'median MiB/s':>14}{'best MiB/s':>12}{'vs copy':>9}")
    for r in rows:
        print(f"{r['kind']:<12}{r['MiB']:>10.1f}{r['first_ms']:>10.1f}{r['median_MiBps']:>14.0f}"
              f"{r['best_MiBps']:>12.0f}{r['median_MiBps'] / base:>8.2f}x")


if __name__ == "__main__":
    main()
