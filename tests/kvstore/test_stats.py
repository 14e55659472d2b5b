"""Per-tier counters reach /metrics with vLLM-style names, and usage's cached tokens count every tier."""

from __future__ import annotations

import dataclasses

import pytest

from tandem.config import KVStoreConfig
from tandem.kvstore.stats import by_tier
from tandem.api.metrics import ServerMetrics
from tests.engine.helpers import prompts, request, run
from tests.kvstore.helpers import settle, tiered_engine


def test_tier_counters_in_metrics(llama_dir, tmp_path):
    prompt = prompts(1, seed=95, min_len=29, max_len=29)[0]
    full = (len(prompt) - 1) // 4 * 4
    engine = tiered_engine(llama_dir, KVStoreConfig(host_bytes=64 * 1024, disk_dir=str(tmp_path)))
    try:
        run(engine, [request(prompt, max_tokens=4)])
        settle(engine)
        engine.kv.pool.reset_cache()
        out = run(engine, [r := request(prompt, max_tokens=4)])[r.request_id]
        settle(engine)
        assert out[-1].num_cached_tokens == full    # usage.prompt_tokens_details.cached_tokens
        values = engine.stats().kv_tier_stats     # what a worker's /metrics reads
        tiers = by_tier(values)
        nb = engine.layout.block_nbytes
        assert tiers["host"]["hits"] == full and tiers["disk"]["hits"] == 0
        assert tiers["host"]["queries"] == 2 * full   # each lookup: every block past an empty device hit
        assert tiers["host"]["read_bytes"] == full // 4 * nb
        assert tiers["disk"]["used_bytes"] > 0 and tiers["store"]["capacity_bytes"] == 0
        assert tiers["host"]["available"] == 1 and tiers["store"]["available"] == 0
        # the cost model's ratios, per tier, for the gateway's routing: the host read was measured
        weights = engine.stats().kv_tier_weights
        cost = engine.connector.worker.cost
        recompute = cost.block_size * cost.prefill_s_per_token
        assert len(weights) == 3 and weights[0] == pytest.approx(cost.block_seconds("host") / recompute)
        assert all(w > 0 for w in weights)
        stats = engine.stats()
        text = ServerMetrics(lambda: stats, lambda: "m").render().decode()
        assert f'tandem:kv_offload_tiering_hits_total{{model_name="m",tier="host"}} {float(full)}' in text
        assert f'tandem:external_prefix_cache_hits_total{{model_name="m"}} {float(full)}' in text
        assert f'tandem:kv_offload_tiering_read_bytes_total{{model_name="m",tier="host"}} {float(full // 4 * nb)}' in text
        assert 'tandem:kv_offload_tiering_available{model_name="m",tier="store"} 0.0' in text
        assert 'tandem:kv_offload_tiering_read_time_total{model_name="m",tier="host"}' in text
        assert f'tandem:kv_offload_tiering_load_cost_ratio{{model_name="m",tier="host"}} {weights[0]}' in text
        # an engine without tiers exports none of them
        no_tiers = dataclasses.replace(engine.stats(), kv_tier_stats=())
        plain = ServerMetrics(lambda: no_tiers, lambda: "m").render().decode()
        assert "kv_offload_tiering" not in plain
    finally:
        engine.shutdown()
