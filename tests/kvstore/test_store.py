"""Mooncake Store with a real mooncake_master: a prefix computed on worker A is a hit on worker B;
the store's new blocks become KV events; a corrupted value is a miss; a master killed mid-run
leaves the workers serving from their local tiers, and they use the store again once it is back."""

from __future__ import annotations

import logging
import time

import torch

from tandem.config import KVStoreConfig
from tandem.kvstore.connector import STORE_STORED
from tandem.kvstore.frame import HEADER_BYTES
from tandem.kvstore.keys import KeySpace, block_hash_of
from tests.conftest import assert_all_blocks_free
from tests.engine.helpers import prompts, request, run, tokens
from tests.kvstore.helpers import settle, tiered_engine, tiers_of, wait_store


def _store_cfg(master, **kw):
    return KVStoreConfig(store_url=master.url, store_segment_bytes=32 << 20, retry_s=0.3, **kw)


def _ref(make_engine, model_dir, prompt, n=6):
    return tokens(run(make_engine(model_dir), [r := request(prompt, max_tokens=n)])[r.request_id])


def test_a_prefix_computed_on_a_is_a_hit_on_b(master, llama_dir, make_engine):
    prompt = prompts(1, seed=80, min_len=37, max_len=37)[0]
    ref = _ref(make_engine, llama_dir, prompt)
    full = (len(prompt) - 1) // 4 * 4
    a = tiered_engine(llama_dir, _store_cfg(master))
    b = tiered_engine(llama_dir, _store_cfg(master))
    try:
        wait_store(a), wait_store(b)
        out = run(a, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == 0
        settle(a)
        stored = [e for e in a.events.since(0, lambda: ()).events if e.kind == STORE_STORED]
        n_blocks = (len(prompt) + 6 - 1) // 4
        assert sum(len(e.block_hashes) for e in stored) == n_blocks     # reported for the gateway
        out = run(b, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == full
        store_b = tiers_of(b).stack["store"]
        assert store_b.counters.hits == full and store_b.counters.read_bytes == full // 4 * b.layout.block_nbytes
        settle(b)
        assert tiers_of(b).stack["store"].counters.writes == 1   # only its new (output) blocks
        assert_all_blocks_free(a), assert_all_blocks_free(b)
    finally:
        a.shutdown(), b.shutdown()


def test_a_corrupted_value_is_a_miss(master, llama_dir, make_engine):
    prompt = prompts(1, seed=81, min_len=21, max_len=21)[0]
    ref = _ref(make_engine, llama_dir, prompt)
    a = tiered_engine(llama_dir, _store_cfg(master))
    b = tiered_engine(llama_dir, _store_cfg(master))
    try:
        wait_store(a), wait_store(b)
        run(a, [request(prompt, max_tokens=6)])
        settle(a)
        # overwrite the prompt's second block in the store with a value whose payload is damaged
        store = tiers_of(a).stack["store"]
        key = KeySpace.of(a.layout, 0).keys([b_hash for b_hash in _hashes(a, prompt)[1:2]], (), a.layout.block_size, 1)[0]
        client = store._client
        frame = bytearray(client.get(key))
        assert len(frame) == HEADER_BYTES + a.layout.block_nbytes
        frame[-1] ^= 0x5A
        assert client.upsert(key, bytes(frame)) == 0
        out = run(b, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref
        # the first block loads, the bad one and everything after it are computed
        assert out[-1].num_cached_tokens == 0 or out[-1].num_cached_tokens == 4
        assert tiers_of(b).stack["store"].counters.corrupt == 1
        settle(b)
        assert_all_blocks_free(b)
    finally:
        a.shutdown(), b.shutdown()


def _hashes(engine, prompt):
    from tandem.kv.block_hash import hash_request_blocks
    return hash_request_blocks(prompt, engine.layout.block_size, (), 0)


def test_master_killed_mid_run_then_restarted(master, llama_dir, make_engine, caplog):
    batch = prompts(3, seed=82, min_len=17, max_len=30)
    refs = [_ref(make_engine, llama_dir, p) for p in batch]
    cfg = _store_cfg(master, host_bytes=256 * 1024)
    a = tiered_engine(llama_dir, cfg)
    try:
        wait_store(a)
        caplog.set_level(logging.WARNING, logger="tandem.kvstore.mooncake_store")
        master.kill()
        for p, ref in zip(batch, refs):        # served, from the device and host memory
            assert tokens(run(a, [r := request(p, max_tokens=6)])[r.request_id]) == ref
            settle(a)
        store = tiers_of(a).stack["store"]
        assert store.counters.errors >= 1 and not store.available
        warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
        assert len(warnings) == 1                 # one warning per outage
        # a repeat hits host memory while the store is down
        assert a.kv.pool.reset_cache()
        out = run(a, [r := request(batch[0], max_tokens=6)])[r.request_id]
        assert tokens(out) == refs[0] and out[-1].num_cached_tokens == (len(batch[0]) - 1) // 4 * 4
        settle(a)
        master.restart()
        # the restarted master has no memory until the clients' heartbeats mount theirs again
        probe = torch.zeros((1, a.layout.block_nbytes), dtype=torch.uint8)
        deadline = time.monotonic() + 20
        while store.write(["probe/-/0000000000000000"], probe) != 1:
            assert time.monotonic() < deadline, "the store did not come back"
            time.sleep(0.2)
        assert store.available
        # back: new blocks go to the (empty, restarted) store and another worker hits them
        fresh = prompts(1, seed=83, min_len=25, max_len=25)[0]
        ref = _ref(make_engine, llama_dir, fresh)
        run(a, [request(fresh, max_tokens=6)])
        settle(a)
        b = tiered_engine(llama_dir, _store_cfg(master))
        try:
            wait_store(b)
            out = run(b, [r := request(fresh, max_tokens=6)])[r.request_id]
            assert tokens(out) == ref and out[-1].num_cached_tokens == (len(fresh) - 1) // 4 * 4
            settle(b)
        finally:
            b.shutdown()
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        assert_all_blocks_free(a)
    finally:
        a.shutdown()


def test_the_store_stays_within_the_memory_its_clients_lend(master):
    """A client lending 16 MiB holds at most 15 values of 1 MiB: puts past that are skipped (no
    error, the tier stays available) or make the master evict older values."""
    from tandem.kvstore.mooncake_store import MooncakeStoreTier

    nb = 1 << 20
    tier = MooncakeStoreTier(master.url, 16 << 20, nb, batch_blocks=8, retry_s=0.3)
    try:
        deadline = time.monotonic() + 20
        while not tier.available:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        keys = [f"cap/-/{i:016x}" for i in range(40)]
        src = torch.randint(0, 255, (40, nb), dtype=torch.uint8)
        for at in range(0, 40, 8):
            tier.write(keys[at:at + 8], src[at:at + 8])
        held = sum(tier.contains_many(keys))
        assert 0 < held <= (16 << 20) // (nb + HEADER_BYTES)
        assert tier.counters.skipped >= 40 - 16 and tier.counters.errors == 0 and tier.available
    finally:
        tier.close()


def test_greedy_identity_with_every_tier_on(master, llama_dir, make_engine, tmp_path):
    """Host memory, disk and the store in one engine, on two workers with small device caches:
    every output equals one plain engine's, on the worker that computed the prompts (device,
    host and disk hits) and on the other one (store hits)."""
    batch = prompts(4, seed=86, min_len=9, max_len=40)
    refs = [_ref(make_engine, llama_dir, p, 5) for p in batch]

    def engine(name):
        cfg = _store_cfg(master, host_bytes=64 * 1024, disk_dir=str(tmp_path / name), disk_bytes=1 << 20)
        return tiered_engine(llama_dir, cfg, num_blocks=24)

    a, b = engine("a"), engine("b")
    try:
        wait_store(a), wait_store(b)
        for e in (a, a, b):
            outs = run(e, [request(p, max_tokens=5) for p in batch])
            assert [tokens(o) for o in outs.values()] == refs
            settle(e)
        stack_a, stack_b = tiers_of(a).stack, tiers_of(b).stack
        assert sum(stack_a[t].counters.hits for t in ("host", "disk")) > 0   # a's device cache evicted
        assert stack_b["store"].counters.hits > 0                           # b computed nothing before
        assert_all_blocks_free(a), assert_all_blocks_free(b)
    finally:
        a.shutdown(), b.shutdown()


def test_a_block_the_store_lost_is_reported_removed_and_saved_again(master, llama_dir, make_engine):
    """The store evicts, or its master restarts empty, without telling anyone: the next lookup
    that finds a block gone reports it (`store_removed`, so the gateway's index of the store stops
    there) and the worker stops believing the store holds it, so the next finish writes it again."""
    from tandem.kvstore.connector import STORE_REMOVED

    prompt = prompts(1, seed=87, min_len=29, max_len=29)[0]
    ref = _ref(make_engine, llama_dir, prompt)
    a = tiered_engine(llama_dir, _store_cfg(master))
    try:
        wait_store(a)
        assert tokens(run(a, [r := request(prompt, max_tokens=6)])[r.request_id]) == ref
        settle(a)
        worker = tiers_of(a)
        store = worker.stack["store"]
        stored = [h for e in a.events.since(0, lambda: ()).events if e.kind == STORE_STORED
                  for h in e.block_hashes]
        keys = [k for k in store_keys(a, stored)]
        assert all(store.contains_many(keys)) and store.counters.writes == 1
        # lost behind the worker's back, as an eviction would (force: past the master's lease on
        # values just written)
        assert store._client.batch_remove(keys, True) == [0] * len(keys)
        assert not any(store.contains_many(keys))
        assert a.kv.pool.reset_cache()
        mark = a.events.since(0, lambda: ()).seq
        out = run(a, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == 0   # nothing to load: recomputed
        settle(a)
        removed = [e.block_hashes for e in a.events.since(mark, lambda: ()).events if e.kind == STORE_REMOVED]
        assert removed == [(stored[0],)]                      # the first block the lookup missed
        looked_up = keys[:(len(prompt) - 1) // 4]   # the prompt's blocks the lookup asked about
        assert store.counters.writes == 2 and all(store.contains_many(looked_up))   # written again
        assert_all_blocks_free(a)
    finally:
        a.shutdown()


def store_keys(engine, hashes):
    """The store keys of `hashes` for requests without a cache salt."""
    space = KeySpace.of(engine.layout, engine.config.cache.hash_seed)
    return space.keys(hashes, (), engine.layout.block_size)
