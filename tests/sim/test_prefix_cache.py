from tandem.sim.kv_tiers import BlockTier
from tandem.sim.prefix_cache import PrefixCache


def test_publish_release_and_lru_eviction_report_events():
    stored, removed = [], []
    c = PrefixCache(4, stored.extend, removed.extend)
    assert c.allocate("a", [], 3)
    c.publish("a", [10, 11, 12])
    assert stored == [10, 11, 12] and c.match([10, 11, 12, 13]) == 3
    c.release("a")
    assert c.live_blocks() == 0 and c.free_blocks() == 1
    assert c.allocate("b", [10], 2)          # reuses 10, evicts the oldest cached: 11
    assert removed == [11] and c.match([10, 11]) == 1
    assert not c.allocate("c", [], 4)        # 10 referenced, 2 anonymous: no room
    c.release("b")
    assert c.free_blocks() == 2 and c.match([10]) == 1


def test_a_block_computed_twice_is_cached_once():
    c = PrefixCache(8)
    assert c.allocate("a", [], 2) and c.allocate("b", [], 2)
    c.publish("a", [1, 2])
    c.publish("b", [1, 2])
    assert c.live_blocks() == 2                 # b's duplicates became references
    c.release("a"), c.release("b")
    assert c.free_blocks() == 6


def test_tier_keeps_the_most_recent_blocks():
    stored, removed = [], []
    t = BlockTier("host", 3, stored.extend, removed.extend)
    t.write([1, 2, 3])
    assert t.match([1, 2]) == 2                 # refreshes 1 and 2
    t.write([4])
    assert removed == [3] and t.match([1, 2, 4]) == 3 and stored == [1, 2, 3, 4]
