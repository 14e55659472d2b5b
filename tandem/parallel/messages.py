"""What rank 0 broadcasts to the other ranks: the cache to allocate once (then, with a KV
handoff, every rank gathers where its cache lives to rank 0), then each step's
inputs (token ids, positions and the sequences' block slices, from which every rank builds the
same AttentionBatch), then a stop. Plain Python values, pickled by broadcast_object_list."""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from tandem.layers.attention_batch import SeqSlice


@dataclass(frozen=True)
class CacheInit:
    num_blocks: int
    block_size: int
    dtype: str               # the cache's storage type name, e.g. "bfloat16"
    handoff: bool = False    # the worker hands KV over: each rank shares its cache with rank 0
    shm_dir: str = ""        # (tandem.parallel.kv_handoff), CPU ranks in a file under this directory


@dataclass(frozen=True)
class StepMessage:
    input_ids: list[int]
    positions: list[int]
    slices: list[SeqSlice]


@dataclass(frozen=True)
class Stop:
    pass


Message = CacheInit | StepMessage | Stop


def broadcast(msg: Message | None, src: int = 0) -> Message:
    """Rank `src` sends `msg`; every other rank passes None and gets it."""
    box = [msg]
    dist.broadcast_object_list(box, src=src)
    return box[0]
