"""Start a parallel worker: rank 0 (this process) runs the engine, ranks 1.. run
tandem.parallel.worker in child processes; all of them load only their own shards, at once.

A rank that dies takes the worker down: the monitor thread sees its process end, marks the
runner failed (every later step raises RankFailed at once, no collective left hanging) and calls
`on_rank_death` (by default: log and SIGTERM this process, so that the server shuts down and
the gateway routes around it). Collectives also time out after ParallelConfig.timeout_s.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import wait

import torch

from tandem.config import CPU_KV_CACHE_BYTES, EngineConfig
from tandem.engine.engine import Engine
from tandem.parallel.config import ParallelConfig
from tandem.parallel.group import close_group, init_group
from tandem.parallel.kv_handoff import ParallelKV
from tandem.parallel.rank_model import load_rank_model
from tandem.parallel.runner import ParallelRunner
from tandem.parallel.worker import worker_main
from tandem.ports import free_port

log = logging.getLogger(__name__)


def _terminate_self(reason: str) -> None:
    log.error("parallel worker going down: %s", reason)
    os.kill(os.getpid(), signal.SIGTERM)


def parallel_engine(config: EngineConfig, pcfg: ParallelConfig,
                    on_rank_death: Callable[[str], None] = _terminate_self) -> Engine:
    # KV loaded from a storage tier would land in rank 0's cache only; the tiers also time a
    # forward of rank 0 alone at start-up. The handoff reaches every rank (tandem.parallel.kv_handoff).
    if config.kv_store.enabled:
        raise ValueError("a parallel worker cannot use KV store tiers yet: no --kv-host-memory/--kv-disk-dir/"
                         "--kv-store with --tensor-parallel-size/--pipeline-parallel-size > 1")
    port = pcfg.master_port or free_port(pcfg.master_addr)
    # --threads is the worker's: its ranks share its cores, so each takes an equal part of them
    threads = max(1, (config.num_threads or torch.get_num_threads()) // pcfg.world_size)
    config = dataclasses.replace(config, num_threads=threads)
    if config.cache.num_blocks is None and config.cache.kv_cache_bytes is None:
        # a GPU share would be measured by a forward of rank 0 alone, which its ranks must join:
        # the CPU's fixed budget instead (--kv-cache-memory sets another)
        config = dataclasses.replace(config, cache=dataclasses.replace(config.cache, kv_cache_bytes=CPU_KV_CACHE_BYTES))
    num_gpus = torch.cuda.device_count() if torch.device(config.model.device).type == "cuda" else 0
    device = pcfg.rank_device(config.model.device, 0, num_gpus)
    pcfg.backend(device.type, num_gpus)          # a backend that cannot work fails before any rank starts
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker_main, args=(config.model, pcfg, r, port, threads),
                         name=f"tandem-rank-{r}", daemon=True) for r in range(1, pcfg.world_size)]
    for p in procs:
        p.start()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, device=str(device)))
    try:
        g = init_group(pcfg, 0, port, device)
        loaded = load_rank_model(config.model, g)
        # the cache has rank 0's shapes; with a transport, the handoff reads and writes every rank's
        engine = Engine.from_config(config, loaded, ParallelKV(g, config.resolved_transport))
    except BaseException:
        for p in procs:
            p.kill()
        close_group()
        raise
    runner = ParallelRunner(loaded, engine.layout, engine.runner.kv_cache, device)
    engine.runner = runner
    closing = threading.Event()

    def monitor() -> None:
        sentinels = {p.sentinel: p for p in procs}
        while sentinels and not closing.is_set():
            for s in wait(list(sentinels), timeout=0.5):
                p = sentinels.pop(s)
                p.join(timeout=1)            # reap it: its exit code is set then
                if not closing.is_set():
                    reason = f"{p.name} exited with code {p.exitcode}"
                    runner.fail(reason)
                    on_rank_death(reason)
                    return

    watcher = threading.Thread(target=monitor, name="tandem-rank-monitor", daemon=True)
    watcher.start()

    def stop_ranks() -> None:
        closing.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        close_group()

    runner.on_close = stop_ranks
    return engine
