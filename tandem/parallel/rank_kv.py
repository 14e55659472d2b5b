"""Which share of each KV block a rank holds, and its cache where rank 0 can map it (the KV
handoff of a parallel worker: tandem.parallel.kv_handoff): a file under the shm directory for CPU
ranks, a CUDA IPC handle for GPU ranks (the ranks of one worker share a host)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import reduce_tensor

from tandem.kv.layout import KVLayout
from tandem.models.arch import ModelArch
from tandem.parallel.config import ParallelConfig
from tandem.parallel.shard import stage_layers
from tandem.transfer.shards import KVShard
from tandem.transfer.shm import allocate_shm_kv, find_shm_file


@dataclass(frozen=True)
class RankCacheRef:
    """Where one rank's cache lives: a shared file and the offset of the cache in it (CPU), or
    torch's rebuild function and arguments of a CUDA tensor shared over IPC (GPU)."""

    path: str | None = None
    offset: int = 0
    cuda_ipc: tuple | None = None


def rank_shard(arch: ModelArch, cfg: ParallelConfig, rank: int) -> KVShard:
    """The rectangle of each KV block that `rank` holds (as shard_model splits the model)."""
    stage, tp_rank = divmod(rank, cfg.tensor_parallel_size)
    layers = stage_layers(arch.num_layers, cfg.pipeline_parallel_size, stage)
    if arch.mla is not None:
        return KVShard(layers, (0, 1))          # one latent, replicated over the TP ranks
    per = arch.num_kv_heads // cfg.tensor_parallel_size
    return KVShard(layers, (tp_rank * per, (tp_rank + 1) * per))


def allocate_rank_cache(layout: KVLayout, num_blocks: int, device: torch.device, shm_dir: str) -> torch.Tensor:
    """A rank's cache [num_blocks, *layout.block_shape] that another process of the host can map."""
    if device.type == "cpu":
        return allocate_shm_kv(layout, num_blocks, shm_dir)
    if device.type != "cuda":
        raise ValueError(f"a parallel worker hands KV over from CPU or CUDA ranks, not {device.type}")
    return layout.allocate(num_blocks, device)


def rank_cache_ref(kv: torch.Tensor, shm_dir: str) -> RankCacheRef:
    if kv.device.type == "cuda":
        return RankCacheRef(cuda_ipc=reduce_tensor(kv))
    found = find_shm_file(kv, shm_dir)
    if found is None:
        raise ValueError(f"a rank's KV cache is not in a shared file under {shm_dir}")
    return RankCacheRef(path=found[0], offset=found[1])


def shared_rank_cache(layout: KVLayout, num_blocks: int, device: torch.device, shm_dir: str) -> torch.Tensor:
    """This rank's cache, announced to rank 0 (ranks 1.. right after the CacheInit broadcast;
    rank 0 gathers: tandem.parallel.kv_handoff)."""
    kv = allocate_rank_cache(layout, num_blocks, device, shm_dir)
    dist.gather_object(rank_cache_ref(kv, shm_dir), None, dst=0)
    return kv


def map_rank_kv(ref: RankCacheRef, layout: KVLayout, num_blocks: int) -> torch.Tensor:
    """Another rank's cache [num_blocks, *layout.block_shape], mapped into this process."""
    if ref.cuda_ipc is not None:
        rebuild, args = ref.cuda_ipc
        kv = rebuild(*args)
    else:
        nbytes = num_blocks * layout.block_nbytes
        raw = torch.from_file(ref.path, shared=True, size=ref.offset + nbytes, dtype=torch.uint8)
        kv = raw[ref.offset:].view(layout.torch_dtype)
    return kv.view(num_blocks, *layout.block_shape)
