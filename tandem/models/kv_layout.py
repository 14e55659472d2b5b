"""The KV cache layout of a loaded model under a cache configuration (what every worker that
shares KV blocks with it must match: the handoff and the store tiers check it)."""

from __future__ import annotations

import torch

from tandem.config import CacheConfig
from tandem.kv.layout import KVLayout
from tandem.models.loader import LoadedModel


def model_identity(loaded: LoadedModel) -> str:
    """What KV blocks of this model are compatible with: its shape and its weights."""
    a = loaded.arch
    return f"{a.architecture}/L{a.num_layers}/H{a.hidden_size}/V{a.vocab_size}/W{loaded.weights_id}"


def layout_of(loaded: LoadedModel, cache: CacheConfig) -> KVLayout:
    a = loaded.arch
    identity = model_identity(loaded)
    dtype = loaded.dtype if cache.kv_cache_dtype == "auto" else torch.float8_e5m2
    return KVLayout(model=identity, dtype=str(dtype).removeprefix("torch."),
                    block_size=cache.block_size, num_layers=a.num_layers,
                    num_kv_heads=a.kv_heads_cached, head_dim=a.kv_dim_cached, kind=a.kv_kind)
