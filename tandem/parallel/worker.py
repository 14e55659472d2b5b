"""A rank other than 0: loads its shards, allocates its KV cache, then runs every step rank 0
broadcasts until told to stop. It never schedules or samples. If rank 0 goes away, the next
collective fails and the process exits (non-zero)."""

from __future__ import annotations

import dataclasses
import logging
import sys

import torch

from tandem.config import ModelConfig
from tandem.layers.attention_batch import AttentionBatch
from tandem.parallel.config import ParallelConfig
from tandem.parallel.group import close_group, init_group
from tandem.parallel.rank_kv import shared_rank_cache
from tandem.parallel.messages import CacheInit, StepMessage, Stop, broadcast
from tandem.parallel.rank_model import load_rank_model, rank_layout

log = logging.getLogger(__name__)


def worker_main(model_cfg: ModelConfig, pcfg: ParallelConfig, rank: int, port: int, num_threads: int) -> None:
    torch.set_num_threads(num_threads)
    num_gpus = torch.cuda.device_count() if torch.device(model_cfg.device).type == "cuda" else 0
    device = pcfg.rank_device(model_cfg.device, rank, num_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model_cfg = dataclasses.replace(model_cfg, device=str(device))
    g = init_group(pcfg, rank, port, device)
    try:
        loaded = load_rank_model(model_cfg, g)
        init = broadcast(None)
        assert isinstance(init, CacheInit), f"expected the cache first, got {init!r}"
        layout = rank_layout(loaded, init.block_size, init.dtype)
        if init.handoff:   # rank 0 maps it: the KV handoff reads and writes this rank's share of each block
            kv_cache = shared_rank_cache(layout, init.num_blocks, device, init.shm_dir)
        else:
            kv_cache = layout.allocate(init.num_blocks, device)
        run_steps(loaded.model, kv_cache, init.block_size, device)
    except Exception:   # noqa: BLE001 - logged; the exit code tells rank 0's monitor
        log.exception("rank %d failed", rank)
        sys.exit(1)
    finally:
        close_group()


def run_steps(model, kv_cache: torch.Tensor, block_size: int, device: torch.device) -> None:
    while True:
        msg = broadcast(None)
        if isinstance(msg, Stop):
            return
        assert isinstance(msg, StepMessage)
        batch = AttentionBatch.build(msg.slices, block_size, device)
        model.plan_step(msg.slices, block_size)
        model(torch.tensor(msg.input_ids, dtype=torch.long, device=device),
              torch.tensor(msg.positions, dtype=torch.long, device=device), batch, kv_cache)
