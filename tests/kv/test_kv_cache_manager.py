from tandem.kv.kv_cache_manager import NO_HIT, KVCacheManager


def test_prefix_hit_shares_full_blocks_and_leaves_one_token():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    prompt = list(range(10))  # 2 full blocks + 2 tokens
    assert kv.allocate("a", len(prompt)) == [0, 1, 2]
    kv.cache_computed("a", prompt, len(prompt), ())
    hit = kv.lookup_prefix("b", prompt, ())
    assert [b.block_id for b in hit.blocks] == [0, 1] and hit.num_tokens == 8
    assert kv.allocate("b", len(prompt), hit) == [3]
    assert kv.block_ids("b") == [0, 1, 3]
    # an exact multiple of the block size still recomputes its last token
    kv2 = KVCacheManager(num_blocks=10, block_size=4)
    kv2.allocate("a", 8)
    kv2.cache_computed("a", prompt[:8], 8, ())
    assert kv2.lookup_prefix("b", prompt[:8], ()).num_tokens == 4


def test_salt_isolates_tenants():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    prompt = list(range(12))
    kv.allocate("a", 12)
    kv.cache_computed("a", prompt, 12, ("tenant-1",))
    assert kv.lookup_prefix("b", prompt, ("tenant-2",)) == NO_HIT
    assert kv.lookup_prefix("c", prompt, ()) == NO_HIT
    assert kv.lookup_prefix("d", prompt, ("tenant-1",)).num_tokens == 8


def test_allocation_counts_free_cache_hits_and_refuses_atomically():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    prompt = list(range(9))
    kv.allocate("a", 9)
    kv.cache_computed("a", prompt, 9, ())
    kv.free("a")
    assert kv.pool.num_free == 4
    hit = kv.lookup_prefix("b", prompt + [50] * 8, ())
    assert hit.num_tokens == 8
    # 17 tokens need 2 hit blocks (free, evictable) + 3 new = 5 > 4: refused, nothing changes
    assert not kv.can_allocate("b", 17, hit)
    assert kv.allocate("b", 17, hit) is None
    assert kv.pool.num_free == 4 and kv.block_ids("b") == []
    # a's blocks were freed tail-first (queue 3, 2, 1, 0); the hits take 0 and 1 out
    assert kv.allocate("b", 16, hit) == [3, 2]
    assert kv.block_ids("b") == [0, 1, 3, 2] and kv.pool.num_free == 0


def test_free_returns_everything_and_keeps_cache():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    prompt = list(range(16))
    kv.allocate("a", 16)
    kv.cache_computed("a", prompt, 16, ())
    kv.allocate("b", 5)
    kv.free("a")
    kv.free("b")
    assert kv.pool.num_free == 8 and kv.pool.num_cached == 4 and kv.num_held() == 0


def test_incremental_growth_one_block_at_a_time():
    kv = KVCacheManager(num_blocks=3, block_size=2)
    assert kv.allocate("a", 2) == [0]
    assert kv.allocate("a", 3) == [1]
    assert kv.allocate("a", 4) == []
    assert kv.allocate("a", 5) == [2]
    assert kv.allocate("a", 7) is None


def test_can_allocate_without_counts_only_blocks_no_one_else_holds():
    """What a request being admitted would find once some running requests were freed: blocks
    shared with a request that stays are not freed; a hit block among the freed ones is taken out
    of the free queue again."""
    kv = KVCacheManager(num_blocks=6, block_size=4)
    prompt = list(range(8))
    kv.allocate("a", 8)                                   # 0, 1
    kv.cache_computed("a", prompt, 8, ())
    kv.allocate("b", 9, kv.lookup_prefix("b", prompt + [9], ()))   # shares 0, 1; then 2
    kv.allocate("c", 12)                                  # 3, 4, 5: nothing free
    assert kv.block_ids("b") == [0, 1, 2] and kv.pool.num_free == 0
    assert not kv.can_allocate_without("w", 8, NO_HIT, ["b"])          # frees 2 only
    assert kv.can_allocate_without("w", 8, NO_HIT, ["a", "b"])         # 0, 1, 2
    assert kv.can_allocate_without("w", 12, NO_HIT, ["c"])
    assert not kv.can_allocate_without("w", 16, NO_HIT, ["c"])
    # w hits 0, 1: with a and b gone 0, 1, 2 are free, w takes 0, 1 back and 2 is left for one more
    hit = kv.lookup_prefix("w", prompt + [7, 7, 7, 7, 7], ())
    assert hit.num_tokens == 8
    assert kv.can_allocate_without("w", 12, hit, ["a", "b"])
    assert not kv.can_allocate_without("w", 16, hit, ["a", "b"])
    kv.free("a")
    kv.free("b")
    assert kv.allocate("w", 12, hit) == [2]


def test_a_worse_priority_admission_shares_but_never_takes_a_better_sessions_retained_blocks():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    session = list(range(12))                          # 3 full blocks, retained at priority 0
    kv.allocate("turn1", 12)
    kv.cache_computed("turn1", session, 12, ())
    kept = kv.cached_blocks("turn1", session, 12, ())
    kv.free("turn1")
    kv.pool.retain("s", kept, priority=0)
    assert kv.pool.num_free == 8 and kv.pool.num_unretained_free == 5
    # a priority-10 one-shot of 6 blocks: 5 unretained are free, the retained 3 are not its
    assert not kv.can_allocate("flood", 24, priority=10)
    assert kv.allocate("flood", 24, priority=10) is None
    assert kv.can_allocate("flood", 24, priority=0)                 # as good as the hold: it may
    assert kv.can_allocate("flood", 24)                             # fcfs (no level): as before
    # a worse request sharing the session's prefix uses the retained blocks it hits
    hit = kv.lookup_prefix("sharer", session + [99] * 5, ())
    assert hit.num_tokens == 12
    assert kv.allocate("sharer", 17, hit, priority=10) == [3, 4]
    assert kv.pool.lookup(kept[0].block_hash) is kept[0]
    # freeing a victim counts only its unretained blocks for a worse request
    kv.allocate("five", 12, priority=10)                             # the 3 unretained left
    assert kv.pool.num_unretained_free == 0
    assert not kv.can_allocate_without("next", 8, NO_HIT, [], priority=10)
    assert kv.can_allocate_without("next", 8, NO_HIT, ["five"], priority=10)
    kv.free("sharer")
    kv.free("five")
    assert kv.pool.num_free == 8
