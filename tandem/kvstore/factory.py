"""Build the tiers and their KV connector for one engine, from its KVStoreConfig."""

from __future__ import annotations

import logging

import torch

from tandem.config import EngineConfig
from tandem.kv.connector import KVConnector
from tandem.kv.layout import KVLayout
from tandem.kvstore.connector import tiered_connector
from tandem.kvstore.cost import CostModel, measure_prefill
from tandem.kvstore.keys import KeySpace
from tandem.kvstore.stack import TierStack
from tandem.kvstore.tier import Tier

log = logging.getLogger(__name__)

_CALIBRATION_TOKENS = 128


def make_tiers(config: EngineConfig, layout: KVLayout, keyspace: KeySpace, on_cuda: bool) -> TierStack:
    cfg = config.kv_store
    nb = layout.block_nbytes
    tiers: list[Tier] = []
    if cfg.host_bytes:
        from tandem.kvstore.host import HostTier

        tiers.append(HostTier(cfg.host_bytes, nb, pin_memory=on_cuda))
    if cfg.disk_dir:
        from tandem.kvstore.disk import DiskTier

        tiers.append(DiskTier(cfg.disk_dir, cfg.disk_bytes, keyspace.space, nb, cfg.retry_s))
    if cfg.store_url:
        from tandem.kvstore.mooncake_store import MooncakeStoreTier

        t = config.transfer
        tiers.append(MooncakeStoreTier(cfg.store_url, cfg.store_segment_bytes, nb, cfg.batch_blocks,
                                       t.mooncake_bind_address, cfg.retry_s, protocol=t.mooncake_protocol,
                                       device=t.mooncake_device, call_timeout_s=cfg.store_timeout_s))
    return TierStack(tiers)


def tiered_connector_for(config: EngineConfig, model: torch.nn.Module, vocab_size: int, layout: KVLayout,
                         kv_cache: torch.Tensor) -> KVConnector:
    """The tiers' connector over `kv_cache`; measures the prefill speed on `model` unless the
    config gives it (call before the engine serves: it borrows the first KV blocks)."""
    cfg = config.kv_store
    keyspace = KeySpace.of(layout, config.cache.hash_seed)
    prefill = cfg.prefill_s_per_token
    if prefill is None and cfg.cost_check:
        tokens = min(_CALIBRATION_TOKENS, config.scheduler.max_num_batched_tokens,
                     kv_cache.shape[0] * layout.block_size)
        prefill = measure_prefill(model, kv_cache, layout.block_size, tokens, vocab_size)
        log.info("KV tiers: this engine prefills at %.1f us per token (a %d-token block: %.2f ms)",
                 prefill * 1e6, layout.block_size, prefill * layout.block_size * 1e3)
    cost = CostModel(prefill or 0.0, layout.block_size, layout.block_nbytes, enabled=cfg.cost_check,
                     explore_s=cfg.cost_explore_s)
    stack = make_tiers(config, layout, keyspace, kv_cache.device.type == "cuda")
    return tiered_connector(stack, kv_cache, keyspace, cost, cfg, layout.block_size, config.cache.hash_seed)
