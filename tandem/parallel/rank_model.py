"""Loading one rank's part of a model: the sharded weights, and the shapes its KV cache has."""

from __future__ import annotations

import dataclasses

from tandem.config import ModelConfig
from tandem.kv.layout import KVLayout
from tandem.models.arch import ModelArch
from tandem.models.kv_layout import model_identity
from tandem.models.loader import LoadedModel, load_model
from tandem.parallel.group import RankGroup
from tandem.parallel.pipeline import PipelineStage
from tandem.parallel.shard import shard_model, stage_layers


def rank_arch(arch: ModelArch, g: RankGroup) -> ModelArch:
    """The arch as this rank's KV cache sees it: its stage's layers, its share of the KV heads
    (MLA's one latent is replicated on every TP rank)."""
    start, end = stage_layers(arch.num_layers, g.pp_size, g.stage)
    kv_heads = arch.num_kv_heads if arch.mla is not None else arch.num_kv_heads // g.tp_size
    return dataclasses.replace(arch, num_layers=end - start, num_kv_heads=kv_heads)


def load_rank_model(cfg: ModelConfig, g: RankGroup) -> LoadedModel:
    """The model of rank `g.rank`: sharded, wrapped as its pipeline stage, with the rank's arch."""
    loaded = load_model(cfg, shard=lambda model: shard_model(model, g), num_ranks=g.cfg.world_size)
    loaded.model = PipelineStage(loaded.model, g)
    loaded.arch = rank_arch(loaded.arch, g)
    return loaded


def rank_layout(loaded: LoadedModel, block_size: int, dtype: str) -> KVLayout:
    a = loaded.arch
    return KVLayout(model=model_identity(loaded), dtype=dtype,
                    block_size=block_size, num_layers=a.num_layers, num_kv_heads=a.kv_heads_cached,
                    head_dim=a.kv_dim_cached, kind=a.kv_kind)
