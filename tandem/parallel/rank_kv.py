"""Which share of each KV block a rank holds, and its cache in a shared file for rank 0 to map
(the KV handoff of a parallel worker: tandem.parallel.kv_handoff)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from tandem.kv.layout import KVLayout
from tandem.models.arch import ModelArch
from tandem.parallel.config import ParallelConfig
from tandem.parallel.shard import stage_layers
from tandem.transfer.shards import KVShard
from tandem.transfer.shm import allocate_shm_kv, find_shm_file


def rank_shard(arch: ModelArch, cfg: ParallelConfig, rank: int) -> KVShard:
    """The rectangle of each KV block that `rank` holds (as shard_model splits the model)."""
    stage, tp_rank = divmod(rank, cfg.tensor_parallel_size)
    layers = stage_layers(arch.num_layers, cfg.pipeline_parallel_size, stage)
    if arch.mla is not None:
        return KVShard(layers, (0, 1))          # one latent, replicated over the TP ranks
    per = arch.num_kv_heads // cfg.tensor_parallel_size
    return KVShard(layers, (tp_rank * per, (tp_rank + 1) * per))


def shared_rank_cache(layout: KVLayout, num_blocks: int, shm_dir: str) -> torch.Tensor:
    """This rank's cache [num_blocks, *layout.block_shape] in a shared file, announced to rank 0
    (ranks 1.. right after the CacheInit broadcast; rank 0 gathers: tandem.parallel.kv_handoff)."""
    kv = allocate_shm_kv(layout, num_blocks, shm_dir)
    dist.gather_object(find_shm_file(kv, shm_dir), None, dst=0)
    return kv


def map_rank_kv(path: str, offset: int, layout: KVLayout, num_blocks: int) -> torch.Tensor:
    """Another rank's cache [num_blocks, *layout.block_shape], mapped into this process."""
    nbytes = num_blocks * layout.block_nbytes
    raw = torch.from_file(path, shared=True, size=offset + nbytes, dtype=torch.uint8)
    return raw[offset:].view(layout.torch_dtype).view(num_blocks, *layout.block_shape)
