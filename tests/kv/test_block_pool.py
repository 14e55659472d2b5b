import pytest

from tandem.kv.block_pool import BlockPool
from tandem.kv.events import KVEventLog


def ids(blocks):
    return [b.block_id for b in blocks]


def test_take_in_order_and_release_tail_first():
    pool = BlockPool(6)
    a = pool.take(3)
    assert ids(a) == [0, 1, 2]
    pool.release(a)
    # freed tail-first: 2, 1, 0 join the queue after 3, 4, 5
    assert ids(pool.take(6)) == [3, 4, 5, 2, 1, 0]


def test_cache_hit_on_free_block_leaves_queue_and_eviction_is_lru():
    events = KVEventLog()
    pool = BlockPool(4, events=events)
    a = pool.take(2)
    pool.cache(a, [111, 222])
    pool.release(a)
    assert pool.num_free == 4 and pool.num_cached == 2
    hit = pool.lookup(111)
    assert hit is not None and hit.block_id == 0
    pool.touch([hit])
    assert pool.num_free == 3 and hit.ref_count == 1
    # queue is now [2, 3, 1]; taking three evicts block 1 (hash 222) last
    taken = pool.take(3)
    assert ids(taken) == [2, 3, 1]
    assert pool.lookup(222) is None and pool.lookup(111) is hit
    kinds = [(e.kind, e.block_hashes) for e in events.since(0, pool.cached_hashes).events]
    assert kinds == [("stored", (111, 222)), ("removed", (222,))]


def test_duplicate_hash_keeps_first_block():
    pool = BlockPool(4)
    a, b = pool.take(1), pool.take(1)
    pool.cache(a, [5])
    pool.cache(b, [5])
    assert pool.lookup(5).block_id == a[0].block_id and b[0].block_hash is None


def test_over_release_and_over_take_raise():
    pool = BlockPool(2)
    a = pool.take(1)
    pool.release(a)
    with pytest.raises(RuntimeError):
        pool.release(a)
    with pytest.raises(RuntimeError):
        pool.take(3)


def test_reset_cache_only_when_idle():
    pool = BlockPool(2)
    a = pool.take(1)
    pool.cache(a, [9])
    assert not pool.reset_cache()
    pool.release(a)
    assert pool.reset_cache() and pool.lookup(9) is None


def test_event_log_resync_when_reader_fell_behind():
    log = KVEventLog(capacity=2)
    for i in range(4):
        log.append("stored", (i,))
    batch = log.since(0, lambda: (2, 3))
    assert batch.reset and [e.kind for e in batch.events] == ["cleared", "stored"]
    assert batch.events[1].block_hashes == (2, 3)
    fresh = log.since(batch.seq - 1, lambda: ())
    assert not fresh.reset and [e.block_hashes for e in fresh.events] == [(3,)]


@pytest.mark.parametrize("enabled", [True, False])
def test_building_a_pool_leaves_the_garbage_collector_as_it_was(enabled):
    # the pool pauses the cyclic collector while it allocates its blocks (start-up time)
    import gc
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        pool = BlockPool(5000)
        assert gc.isenabled() == enabled
        assert [b.block_id for b in pool.blocks] == list(range(5000)) and pool.num_free == 5000
    finally:
        gc.enable() if was else gc.disable()


def test_cached_prefix_is_the_leading_run_of_cached_hashes():
    pool = BlockPool(4)
    blocks = pool.take(3)
    pool.cache(blocks, [10, 11, 12])
    pool.release(blocks)
    assert ids(pool.cached_prefix([10, 11, 99, 12])) == [0, 1]     # stops at the first miss
    assert pool.cached_prefix([99, 10]) == []
    assert [b.ref_count for b in pool.blocks] == [0, 0, 0, 0]       # no reference taken
