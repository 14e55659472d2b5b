from tandem.kv.block_hash import hash_request_blocks
from tandem.router.prefix_index import PrefixIndex


def test_match_counts_leading_blocks_only():
    idx = PrefixIndex()
    idx.stored("a", [1, 2, 3])
    idx.stored("b", [1, 2, 3, 4])
    idx.stored("c", [2, 3, 4])  # lost block 1: nothing reusable
    assert idx.match([1, 2, 3, 4, 5]) == {"a": 3, "b": 4}
    assert idx.match([9, 1]) == {}
    assert idx.match([]) == {}


def test_removed_breaks_the_chain_and_clear_forgets_worker():
    idx = PrefixIndex()
    idx.stored("a", [1, 2, 3])
    idx.stored("b", [1, 2])
    idx.removed("a", [2])
    assert idx.match([1, 2, 3]) == {"a": 1, "b": 2}
    idx.clear("b")
    assert idx.match([1, 2, 3]) == {"a": 1}
    assert idx.num_blocks("b") == 0 and idx.workers() == ["a"]
    idx.removed("zzz", [1])  # unknown worker: no-op


def test_apply_event_replies_including_reset():
    idx = PrefixIndex()
    nxt = idx.apply("a", {"seq": 2, "reset": False, "events": [
        {"seq": 1, "type": "stored", "block_hashes": ["10", "11", "12"]},
        {"seq": 2, "type": "removed", "block_hashes": ["12"]}]})
    assert nxt == 2 and idx.match([10, 11, 12]) == {"a": 2}
    # a resync replaces the whole view of the worker
    nxt = idx.apply("a", {"seq": 7, "reset": True, "events": [
        {"seq": 7, "type": "cleared", "block_hashes": []},
        {"seq": 7, "type": "stored", "block_hashes": [str(2**64 - 1)]}]})
    assert nxt == 7 and idx.match([10]) == {} and idx.match([2**64 - 1]) == {"a": 1}


def test_matches_real_chained_hashes_with_salt():
    toks = list(range(100))
    idx = PrefixIndex()
    idx.stored("a", hash_request_blocks(toks[:64], 16, (), 0))
    assert idx.match(hash_request_blocks(toks, 16, (), 0)) == {"a": 4}
    assert idx.match(hash_request_blocks(toks, 16, ("tenant-b",), 0)) == {}
