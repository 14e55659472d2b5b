"""Host and disk tiers in the engine: a prefix evicted from the device is a hit from host memory,
then from disk, then from disk after a restart; greedy output never changes; counters per tier."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tandem.config import KVStoreConfig
from tests.conftest import assert_all_blocks_free
from tests.engine.helpers import prompts, request, run, tokens
from tests.kvstore.helpers import settle, tiered_engine, tiers_of


def _ref(make_engine, model_dir, prompt, n=6):
    return tokens(run(make_engine(model_dir), [r := request(prompt, max_tokens=n)])[r.request_id])


def test_host_then_disk_then_restart(llama_dir, make_engine, tmp_path):
    prompt = prompts(1, seed=70, min_len=33, max_len=33)[0]
    ref = _ref(make_engine, llama_dir, prompt)
    full = (len(prompt) - 1) // 4 * 4          # every block but the one holding the last token
    cfg = KVStoreConfig(host_bytes=64 * 1024, disk_dir=str(tmp_path), disk_bytes=1 << 20)
    engine = tiered_engine(llama_dir, cfg)
    try:
        out = run(engine, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == 0
        settle(engine)
        stack = tiers_of(engine).stack
        assert len(stack["host"].keys()) == (len(prompt) + 6 - 1) // 4   # prompt and output blocks
        assert len(stack["disk"].keys()) == len(stack["host"].keys())
        # the device forgets: the prefix comes back from host memory, synchronously
        assert engine.kv.pool.reset_cache()
        out = run(engine, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == full
        assert stack["host"].counters.hits == full and stack["disk"].counters.hits == 0
        settle(engine)
        # host memory forgets too: from disk, asynchronously, then copied up into host memory
        assert engine.kv.pool.reset_cache()
        stack["host"].remove(stack["host"].keys())
        out = run(engine, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == full
        assert stack["disk"].counters.hits == full
        assert len(stack["host"].keys()) == full // 4
        settle(engine)
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()
    # a new worker on the same directory finds the blocks (no host tier: disk only)
    again = tiered_engine(llama_dir, KVStoreConfig(disk_dir=str(tmp_path), disk_bytes=1 << 20))
    try:
        out = run(again, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == full
        settle(again)
        assert_all_blocks_free(again)
    finally:
        again.shutdown()


@pytest.mark.parametrize("tiers", ["host", "disk", "host+disk"])
def test_greedy_identity_with_tiers(llama_dir, make_engine, tmp_path, tiers):
    batch = prompts(4, seed=71, min_len=9, max_len=40)
    refs = [_ref(make_engine, llama_dir, p, 5) for p in batch]
    cfg = KVStoreConfig(host_bytes=(64 * 1024 if "host" in tiers else 0),
                        disk_dir=str(tmp_path) if "disk" in tiers else None, disk_bytes=1 << 20)
    engine = tiered_engine(llama_dir, cfg, num_blocks=24)   # a small device cache: it evicts
    try:
        for _ in range(2):
            outs = run(engine, [request(p, max_tokens=5) for p in batch])
            assert [tokens(o) for o in outs.values()] == refs
            settle(engine)
        assert sum(t.counters.hits for t in tiers_of(engine).stack.tiers) > 0
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def test_a_slow_tier_is_not_used(llama_dir, make_engine, tmp_path):
    """Loading costs more than recomputing: the blocks are recomputed, not loaded."""
    prompt = prompts(1, seed=72, min_len=30, max_len=30)[0]
    ref = _ref(make_engine, llama_dir, prompt)
    engine = tiered_engine(llama_dir, KVStoreConfig(disk_dir=str(tmp_path), prefill_s_per_token=1e-12,
                                                    cost_explore_s=None))
    try:
        run(engine, [request(prompt, max_tokens=6)])
        settle(engine)
        assert engine.kv.pool.reset_cache()
        out = run(engine, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == 0
        disk = tiers_of(engine).stack["disk"]
        assert disk.counters.hits == 0 and disk.counters.queries > 0
        settle(engine)
    finally:
        engine.shutdown()


def test_a_save_backlog_over_its_bound_skips_the_lower_tiers(llama_dir, tmp_path):
    prompt = prompts(1, seed=73, min_len=20, max_len=20)[0]
    cfg = KVStoreConfig(host_bytes=64 * 1024, disk_dir=str(tmp_path), max_pending_save_bytes=1)
    engine = tiered_engine(llama_dir, cfg)
    try:
        run(engine, [request(prompt, max_tokens=4)])
        settle(engine)
        stack = tiers_of(engine).stack
        n = (len(prompt) + 4 - 1) // 4
        assert len(stack["host"].keys()) == n                  # host memory still gets them
        assert stack["disk"].keys() == [] and stack["disk"].counters.skipped == n
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def test_a_declared_shared_prefix_is_one_tenants_hit_from_another_tenants_host_blocks(llama_dir, tmp_path):
    """--shared-prefixes in the tiers: B finds in host memory only the whole blocks of the declared
    prefix that A saved (their keys carry no tenant); A finds all of its own."""
    prompt = prompts(1, seed=71, min_len=33, max_len=33)[0]
    engine = tiered_engine(llama_dir, KVStoreConfig(host_bytes=64 * 1024))

    def send(tenant):
        r = request(prompt, max_tokens=4)
        r.context = replace(r.context, tenant=tenant, shared_prefix_tokens=14)   # 3 whole blocks of 4
        return run(engine, [r])[r.request_id][-1].num_cached_tokens

    try:
        assert send("key-0") == 0
        settle(engine)
        host = tiers_of(engine).stack["host"]
        assert engine.kv.pool.reset_cache()
        assert send("key-1") == 12 and host.counters.hits == 12
        settle(engine)
        assert engine.kv.pool.reset_cache()
        assert send("key-0") == (len(prompt) - 1) // 4 * 4
        settle(engine)
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()
