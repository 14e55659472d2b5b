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
tandem.parallel.worker. gloo on the CPU, NCCL on CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise ValueError("tensor_parallel_size and pipeline_parallel_size must be >= 1")
        if self.expert_dispatch not in ("allreduce", "alltoall"):
            raise ValueError(f"expert_dispatch {self.expert_dispatch!r}: allreduce or alltoall")
        if self.expert_dispatch == "alltoall" and not self.enable_expert_parallel:
            raise ValueError("expert_dispatch alltoall needs enable_expert_parallel (whole experts per rank)")

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def enabled(self) -> bool:
        return self.world_size > 1
