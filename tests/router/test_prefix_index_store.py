"""The prefix index learns the shared store's blocks from workers' `store_stored` events, as the
pseudo-worker "store", bounded, and a worker's own events never touch it."""

from tandem.router.prefix_index import STORE, PrefixIndex


def test_store_events_go_to_the_pseudo_worker():
    idx = PrefixIndex()
    idx.apply("w1", {"seq": 3, "reset": False, "events": [
        {"seq": 1, "type": "stored", "block_hashes": ["1", "2"]},
        {"seq": 2, "type": "store_stored", "block_hashes": ["1", "2", "3"]},
        {"seq": 3, "type": "store_removed", "block_hashes": ["3"]}]})
    assert idx.match([1, 2, 3]) == {"w1": 2, STORE: 2}
    # another worker reports the same store: one holder
    idx.apply("w2", {"seq": 1, "reset": False, "events": [
        {"seq": 1, "type": "store_stored", "block_hashes": ["3", "4"]}]})
    assert idx.match([1, 2, 3, 4]) == {"w1": 2, STORE: 4}
    # a worker's resync clears its own view, not the store's
    idx.apply("w1", {"seq": 9, "reset": True, "events": [
        {"seq": 9, "type": "cleared", "block_hashes": []}, {"seq": 9, "type": "stored", "block_hashes": []}]})
    assert idx.match([1, 2, 3, 4]) == {STORE: 4}


def test_the_store_view_is_bounded_oldest_first():
    idx = PrefixIndex(store_limit=3)
    idx.stored(STORE, [1, 2, 3])
    idx.stored(STORE, [1])          # reported again: the newest
    idx.stored(STORE, [4])          # over the limit: 2, the oldest, goes
    assert idx.num_blocks(STORE) == 3
    assert idx.match([1]) == {STORE: 1} and idx.match([2]) == {} and idx.match([3, 4]) == {STORE: 2}


def test_the_router_passes_the_store_prefix_to_the_policy():
    from tandem.kv.block_hash import hash_request_blocks
    from tandem.router.router import HashMemo
    from tests.router.test_router import cluster

    reg, index, tracker, router, decisions = cluster(["both", "both"])
    toks = list(range(40))
    index.stored("http://127.0.0.1:9000", hash_request_blocks(toks[:24], 4, (), 0))
    tracker.dispatch("x", "http://127.0.0.1:9000", pending=10)   # the holder is a little busy
    assert router.choose("both", HashMemo(toks, ()), None).worker.url == "http://127.0.0.1:9000"
    index.stored(STORE, hash_request_blocks(toks[:32], 4, (), 0))
    r = router.choose("both", HashMemo(toks, ()), None)
    assert r.request.shared_blocks == 8
    assert (r.worker.url, r.decision.reason) == ("http://127.0.0.1:9001", "store")
    assert (r.cached_blocks, r.uncached_tokens) == (0, 8)   # it computes only what no one holds
