"""Cost per loaded block of each KV tier, against recomputing the block.

    PYTHONPATH=. .venv/bin/python benchmarks/kvstore/tier_cost.py [--block-kib 64,128] [--blocks 256] [--batch 32]

For each block size: a writer process puts `--blocks` blocks through the tiers (host memory is
per process, so it is written and read here), then this process reads them back in batches of
`--batch` through the same code the connector uses (HostTier, DiskTier, MooncakeStoreTier against
a mooncake_master started here), and prints microseconds per block (median over batches, and the
first batch: cold for the store's connection). Disk reads are page-cache reads unless the cache is
dropped (not possible without root): they bound the disk tier from below. Baseline: a plain copy
of one block within this process's memory.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time

import torch

from tandem.kvstore.disk import DiskTier
from tandem.kvstore.host import HostTier
from tandem.kvstore.master import start_master
from tandem.kvstore.mooncake_store import MooncakeStoreTier

SPACE = "b" * 16


def _keys(n: int, tag: int) -> list[str]:
    return [f"{SPACE}/-/{(tag << 32) + i:016x}" for i in range(n)]


def _wait(store: MooncakeStoreTier) -> None:
    deadline = time.monotonic() + 30
    while not store.available:
        if time.monotonic() > deadline:
            raise TimeoutError("store client did not connect")
        time.sleep(0.02)


def writer(conn, url: str, disk_dir: str, nbytes: int, blocks: int, tag: int) -> None:
    torch.set_num_threads(1)
    src = torch.randint(0, 255, (blocks, nbytes), dtype=torch.uint8)
    store = MooncakeStoreTier(url, max(256 << 20, 2 * blocks * nbytes), nbytes, batch_blocks=32)
    _wait(store)
    keys = _keys(blocks, tag)
    disk = DiskTier(disk_dir, 1 << 40, SPACE, nbytes)
    for at in range(0, blocks, 32):
        store.write(keys[at:at + 32], src[at:at + 32])
        disk.write(keys[at:at + 32], src[at:at + 32])
    conn.send("written")
    conn.recv()        # keep the segment (the store's memory lives in its clients) until read
    store.close()


def per_block_us(read, keys, dst, batch) -> tuple[float, float]:
    times = []
    for at in range(0, len(keys), batch):
        start = time.perf_counter()
        n = read(keys[at:at + batch], dst[at:at + batch])
        times.append((time.perf_counter() - start) / max(1, n) * 1e6)
        assert n == len(keys[at:at + batch]), f"read {n} of {len(keys[at:at + batch])}"
    return statistics.median(times), times[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--block-kib", default="64,128")
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")
    master = start_master()
    try:
        print("| block | tier | us per block (median) | first batch | MiB/s |")
        print("|---|---|---:|---:|---:|")
        for tag, kib in enumerate(int(k) for k in args.block_kib.split(",")):
            nbytes = kib * 1024
            with tempfile.TemporaryDirectory(dir=os.environ.get("KV_BENCH_DIR", "/tmp")) as disk_dir:
                ctx = mp.get_context("spawn")
                conn, child = ctx.Pipe()
                proc = ctx.Process(target=writer, args=(child, master.url, disk_dir, nbytes, args.blocks, tag))
                proc.start()
                assert conn.recv() == "written"
                keys = _keys(args.blocks, tag)
                kv = torch.zeros((args.blocks, nbytes), dtype=torch.uint8)   # the "device" blocks
                dst = [kv[i] for i in range(args.blocks)]
                src = torch.randint(0, 255, (args.blocks, nbytes), dtype=torch.uint8)
                host = HostTier(args.blocks * nbytes, nbytes)
                host.write(keys, src)
                disk = DiskTier(disk_dir, 1 << 40, SPACE, nbytes)
                store = MooncakeStoreTier(master.url, 64 << 20, nbytes, batch_blocks=args.batch)
                _wait(store)
                start = time.perf_counter()
                for i in range(args.blocks):
                    kv[i].copy_(src[i])
                copy_us = (time.perf_counter() - start) / args.blocks * 1e6
                rows = [("copy (baseline)", copy_us, copy_us)]
                for name, tier in (("host", host), ("disk (page cache)", disk), ("store", store)):
                    rows.append((name, *per_block_us(tier.read, keys, dst, args.batch)))
                for name, med, first in rows:
                    print(f"| {kib} KiB | {name} | {med:.1f} | {first:.1f} | {nbytes / med / 1.048576:.0f} |")
                conn.send("done")
                proc.join(30)
                store.close()
    finally:
        master.stop()


if __name__ == "__main__":
    main()
