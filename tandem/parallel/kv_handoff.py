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

import torch
import torch.distributed as dist

from tandem.config import EngineConfig
from tandem.engine.engine import Engine
from tandem.models.kv_layout import layout_of
from tandem.models.loader import LoadedModel
from tandem.parallel.group import RankGroup
from tandem.parallel.messages import CacheInit, broadcast
from tandem.parallel.rank_kv import allocate_rank_cache, map_rank_kv, rank_cache_ref, rank_shard
from tandem.tokenization.tokenizer import Tokenizer
from tandem.transfer.shards import ShardedKV


def handoff_engine(config: EngineConfig, loaded: LoadedModel, g: RankGroup, kind: str) -> Engine:
    """Rank 0's engine with the KV handoff over every rank's cache; tells the ranks to allocate theirs."""
    if g.device.type != "cpu" and kind != "tcp":
        raise ValueError(f"a parallel worker on {g.device.type} hands KV over with --kv-transport tcp, "
                         f"not {kind} (its caches are not in host memory)")
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    arch = loaded.model.arch                                  # the whole model's, not this rank's
    local = layout_of(loaded, config.cache)
    whole = layout_of(dataclasses.replace(loaded, arch=arch), config.cache)
    # parallel_engine sets kv_cache_bytes when neither it nor num_blocks was given
    num_blocks = config.cache.num_blocks or config.cache.kv_cache_bytes // local.block_nbytes
    shm_dir = config.transfer.shm_dir
    own = allocate_rank_cache(local, num_blocks, g.device, shm_dir)
    broadcast(CacheInit(num_blocks, local.block_size, local.dtype, handoff=True, shm_dir=shm_dir))
    refs: list = [None] * g.cfg.world_size
    dist.gather_object(rank_cache_ref(own, shm_dir), refs, dst=0)
    parts = []
    for rank, ref in enumerate(refs):
        shard = rank_shard(arch, g.cfg, rank)
        parts.append((shard, own if rank == 0 else map_rank_kv(ref, shard.layout(whole), num_blocks)))
    kv = ShardedKV(whole, tuple(parts))

    from tandem.transfer.factory import make_sharded_transport
    from tandem.transfer.handoff import handoff_connector

    transport = make_sharded_transport(kind, kv, config.transfer)
    transport.source.start()
    tokenizer = Tokenizer.from_dir(config.model.path, config.model.chat_template)
    proposer = None
    if config.speculative is not None:
        from tandem.spec.factory import make_proposer
        from tandem.spec.target import SpecTarget

        proposer = make_proposer(config.speculative, SpecTarget(config, loaded, tokenizer))
    return Engine(config, loaded, tokenizer, own,
                  handoff_connector(transport, whole), proposer, transport_address=transport.source.address)
