"""ParallelConfig: how one worker spreads its model over ranks (vLLM's flags and meanings).

- tensor_parallel_size (TP): each layer's heads and intermediate dimension split across TP
  ranks; an all-reduce after each attention and MLP output projection.
- enable_expert_parallel (EP): MoE layers place whole experts on the TP ranks (expert e on rank
  e * TP // num_experts) instead of slicing every expert. expert_dispatch "allreduce" (the
  default): tokens are routed identically on every rank and the expert outputs summed by one
  all-reduce; "alltoall": each rank routes its slice of the tokens, dispatches them to the
  experts' ranks and combines the outputs that come back (all-to-all), then one all-gather
  (tandem/parallel/expert_dispatch.py).
- pipeline_parallel_size (PP): the decoder layers split into consecutive stages, one per PP
  rank; hidden states go stage to stage; the first rank (which schedules and samples) gets the
  last stage's output back; a step's sequences go through in micro-batches so that stages
  overlap.
World size = TP x PP; rank = stage * TP + tp_rank. Rank 0 runs the engine; the others run
tandem.parallel.worker. Rank r of a CUDA worker uses the r-th GPU after the one the worker was
given (wrapping round). distributed_backend "auto": gloo on the CPU; on CUDA NCCL when every rank
has a GPU of its own, else gloo with each collective staged through host memory (ranks sharing a
GPU: NCCL refuses two ranks on one device). "nccl" or "gloo" force one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BACKENDS = ("auto", "nccl", "gloo")


@dataclass(frozen=True)
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    expert_dispatch: str = "allreduce"    # with EP: allreduce | alltoall (see above)
    pipeline_micro_batches: int = 2       # with PP: a step's sequences in up to this many groups in flight
    master_addr: str = "127.0.0.1"       # where rank 0's rendezvous store listens
    master_port: int = 0                  # 0: a free port
    timeout_s: float = 120.0              # a collective waiting longer fails (a rank is gone)
    distributed_backend: str = "auto"     # auto | nccl | gloo (see above)

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise ValueError("tensor_parallel_size and pipeline_parallel_size must be >= 1")
        if self.expert_dispatch not in ("allreduce", "alltoall"):
            raise ValueError(f"expert_dispatch {self.expert_dispatch!r}: allreduce or alltoall")
        if self.expert_dispatch == "alltoall" and not self.enable_expert_parallel:
            raise ValueError("expert_dispatch alltoall needs enable_expert_parallel (whole experts per rank)")
        if self.distributed_backend not in BACKENDS:
            raise ValueError(f"distributed_backend {self.distributed_backend!r}: one of {', '.join(BACKENDS)}")

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def rank_device(self, device: str, rank: int, num_gpus: int) -> torch.device:
        """Where rank `rank` computes, for a worker given `device` ("cpu", "cuda", "cuda:N") on a
        host with `num_gpus` GPUs: the CPU, or the GPU `rank` places after the given one."""
        d = torch.device(device)
        if d.type != "cuda":
            return d
        if num_gpus < 1:
            raise ValueError(f"device {device!r}: no CUDA GPU is visible")
        return torch.device("cuda", ((d.index or 0) + rank) % num_gpus)

    def backend(self, device_type: str, num_gpus: int) -> str:
        """The torch.distributed backend of a worker on `device_type` with `num_gpus` GPUs visible."""
        if device_type != "cuda":
            if self.distributed_backend == "nccl":
                raise ValueError("the nccl backend needs CUDA ranks (--device cuda)")
            return "gloo"
        own_gpu = num_gpus >= self.world_size
        if self.distributed_backend == "nccl" and not own_gpu:
            raise ValueError(f"NCCL needs a GPU per rank: {self.world_size} ranks, {num_gpus} GPU(s) "
                             "visible (--distributed-backend gloo lets ranks share a GPU)")
        if self.distributed_backend == "auto":
            return "nccl" if own_gpu else "gloo"
        return self.distributed_backend
