"""A parallel worker's KV handoff: rank 0 serves and pulls every rank's share of each block.

Every rank holds its rectangle of each KV block (KVShard: its pipeline stage's layers, its
tensor-parallel share of the KV heads; MLA's latent whole on every TP rank) under the block ids
rank 0's scheduler gave. For the handoff each rank allocates its cache in a file under the shm
directory and tells rank 0 where (one gather at start-up); rank 0 maps all of them (the ranks of
one worker share a host) and hands the transport a ShardedKV over the mapped caches:
- as a source, its reads assemble whole blocks a few at a time from the ranks' pieces (tcp), or
  name every rank's file so that the sink copies the pieces itself (shm);
- as a sink, a pull writes each rank's piece of every block straight into that rank's cache.
So the wire carries the whole model's blocks (the handle's layout is the whole model's) and any
two layouts of the same model, dtype and block size hand over to each other; the pin, the pull's
confirmation and the release stay with rank 0's scheduler, as on one process. The other ranks
never take part in a transfer: a loaded block is in their cache before rank 0 schedules the step
that reads it (the broadcast of that step's inputs orders them).
CPU ranks share their caches as files under the shm directory, GPU ranks as CUDA IPC handles
(rank 0 then reads and writes the other ranks' GPU memory: peer copies, or through the host when
the GPUs have no peer access); the shm transport needs host memory, tcp serves both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch.distributed as dist

from tandem.config import EngineConfig
from tandem.engine.kv_placement import EngineKV
from tandem.kv.layout import KVLayout
from tandem.models.kv_layout import layout_of
from tandem.models.loader import LoadedModel
from tandem.parallel.group import RankGroup
from tandem.parallel.messages import CacheInit, broadcast
from tandem.parallel.rank_kv import allocate_rank_cache, map_rank_kv, rank_cache_ref, rank_shard
from tandem.transfer.factory import make_sharded_transport
from tandem.transfer.shards import ShardedKV


@dataclass(frozen=True)
class ParallelKV:
    """Rank 0's KV placement (tandem/engine/kv_placement.py): tells the other ranks to allocate
    theirs (the CacheInit broadcast); with a transport `kind`, maps them all for the handoff."""

    g: RankGroup
    kind: str | None   # the KV transport; None: no handoff, each rank's cache stays its own

    def __post_init__(self) -> None:
        if self.kind is not None and self.g.device.type != "cpu" and self.kind != "tcp":
            raise ValueError(f"a parallel worker on {self.g.device.type} hands KV over with --kv-transport "
                             f"tcp, not {self.kind} (its caches are not in host memory)")

    def allocate(self, config: EngineConfig, loaded: LoadedModel, layout: KVLayout,
                 num_blocks: int) -> EngineKV:
        """`layout`: rank 0's share of each block (its layers and KV heads)."""
        if self.kind is None:
            cache = layout.allocate(num_blocks, config.model.device)
            broadcast(CacheInit(num_blocks, layout.block_size, layout.dtype))
            return EngineKV(cache)
        g = self.g
        arch = loaded.model.arch                                  # the whole model's, not this rank's
        whole = layout_of(dataclasses.replace(loaded, arch=arch), config.cache)
        shm_dir = config.transfer.shm_dir
        own = allocate_rank_cache(layout, num_blocks, g.device, shm_dir)
        broadcast(CacheInit(num_blocks, layout.block_size, layout.dtype, handoff=True, shm_dir=shm_dir))
        refs: list = [None] * g.cfg.world_size
        dist.gather_object(rank_cache_ref(own, shm_dir), refs, dst=0)
        parts = []
        for rank, ref in enumerate(refs):
            shard = rank_shard(arch, g.cfg, rank)
            parts.append((shard, own if rank == 0 else map_rank_kv(ref, shard.layout(whole), num_blocks)))
        kv = ShardedKV(whole, tuple(parts))
        return EngineKV(own, make_sharded_transport(self.kind, kv, config.transfer), whole)
