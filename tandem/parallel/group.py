"""RankGroup: this rank's place in a TP x PP worker and the collectives it uses (torch.distributed).

Invariants: every rank creates the same process groups in the same order (torch.distributed
requires it); a TP all-reduce runs over the ranks of one pipeline stage; pipeline sends go from
a stage's tp_rank to the next stage's same tp_rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from tandem.parallel.config import ParallelConfig


@dataclass
class RankGroup:
    cfg: ParallelConfig
    rank: int
    device: torch.device
    tp_group: object = None       # this stage's TP process group (None when TP = 1)

    @property
    def tp_size(self) -> int:
        return self.cfg.tensor_parallel_size

    @property
    def pp_size(self) -> int:
        return self.cfg.pipeline_parallel_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def stage(self) -> int:
        return self.rank // self.tp_size

    def stage_rank(self, stage: int) -> int:
        """The rank of `stage` with this rank's tp_rank."""
        return stage * self.tp_size + self.tp_rank

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        # x [..] -> its sum over this stage's TP ranks (in place)
        dist.all_reduce(x, group=self.tp_group)
        return x


def init_group(cfg: ParallelConfig, rank: int, port: int, device: torch.device) -> RankGroup:
    """Join the worker's process group (blocks until every rank has joined)."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{cfg.master_addr}:{port}", rank=rank,
                            world_size=cfg.world_size, timeout=timedelta(seconds=cfg.timeout_s))
    group = RankGroup(cfg, rank, device)
    for stage in range(cfg.pipeline_parallel_size):   # every rank creates every group, in order
        ranks = list(range(stage * cfg.tensor_parallel_size, (stage + 1) * cfg.tensor_parallel_size))
        g = dist.new_group(ranks) if cfg.tensor_parallel_size > 1 else None
        if stage == group.stage:
            group.tp_group = g
    return group


def close_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
