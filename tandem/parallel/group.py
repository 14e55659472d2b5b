"""RankGroup: this rank's place in a TP x PP worker and the collectives it uses (torch.distributed).

Invariants: every rank creates the same process groups in the same order (torch.distributed
requires it); a TP all-reduce runs over the ranks of one pipeline stage; pipeline sends go from
a stage's tp_rank to the next stage's same tp_rank. With gloo on CUDA ranks (ranks sharing a
GPU) every collective goes through a host copy of its tensor: the caller always passes and gets
tensors on its own device, whatever the backend.
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
    backend: str = "gloo"
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

    @property
    def staged(self) -> bool:
        """Collectives copy through host memory (gloo with tensors on a GPU)."""
        return self.backend == "gloo" and self.device.type != "cpu"

    def stage_rank(self, stage: int) -> int:
        """The rank of `stage` with this rank's tp_rank."""
        return stage * self.tp_size + self.tp_rank

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        # x [..] -> its sum over this stage's TP ranks (in place)
        if self.staged:
            host = x.cpu()
            dist.all_reduce(host, group=self.tp_group)
            return x.copy_(host)
        dist.all_reduce(x, group=self.tp_group)
        return x

    def all_gather(self, outs: list[torch.Tensor], x: torch.Tensor) -> None:
        """outs[r] := x of TP rank r (equal shapes)."""
        if self.staged:
            hosts = [torch.empty_like(o, device="cpu") for o in outs]
            dist.all_gather(hosts, x.cpu(), group=self.tp_group)
            for o, h in zip(outs, hosts):
                o.copy_(h)
            return
        dist.all_gather(outs, x, group=self.tp_group)

    def all_to_all(self, out: torch.Tensor, x: torch.Tensor, out_splits: list[int] | None = None,
                   in_splits: list[int] | None = None) -> None:
        """all_to_all_single over this stage's TP ranks (rows of x split by in_splits, out's by out_splits)."""
        if self.staged:
            host = torch.empty_like(out, device="cpu")
            dist.all_to_all_single(host, x.cpu(), out_splits, in_splits, group=self.tp_group)
            out.copy_(host)
            return
        dist.all_to_all_single(out, x, out_splits, in_splits, group=self.tp_group)

    def recv(self, buf: torch.Tensor, src: int) -> torch.Tensor:
        if self.staged:
            host = torch.empty_like(buf, device="cpu")
            dist.recv(host, src=src)
            return buf.copy_(host)
        dist.recv(buf, src=src)
        return buf

    def isend(self, x: torch.Tensor, dst: int) -> tuple[dist.Work, torch.Tensor]:
        """Start sending x; returns the work and the tensor to keep alive until it completes."""
        sent = x.cpu() if self.staged else x
        return dist.isend(sent, dst=dst), sent


def init_group(cfg: ParallelConfig, rank: int, port: int, device: torch.device) -> RankGroup:
    """Join the worker's process group (blocks until every rank has joined)."""
    num_gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    backend = cfg.backend(device.type, num_gpus)
    dist.init_process_group(backend, init_method=f"tcp://{cfg.master_addr}:{port}", rank=rank,
                            world_size=cfg.world_size, timeout=timedelta(seconds=cfg.timeout_s),
                            **({"device_id": device} if backend == "nccl" else {}))
    group = RankGroup(cfg, rank, device, backend)
    for stage in range(cfg.pipeline_parallel_size):   # every rank creates every group, in order
        ranks = list(range(stage * cfg.tensor_parallel_size, (stage + 1) * cfg.tensor_parallel_size))
        g = dist.new_group(ranks) if cfg.tensor_parallel_size > 1 else None
        if stage == group.stage:
            group.tp_group = g
    return group


def close_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
