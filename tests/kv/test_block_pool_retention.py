"""Retention in the block pool: retained blocks are taken after every unretained free block (then
tail-first, recorded for demotion), cold blocks first, holds released warm or cold."""

from tandem.kv.block_pool import BlockPool


def _cached(pool, ids, base=100):
    """Take blocks, cache them with hashes base+i, free them (in sequence order)."""
    blocks = pool.take(len(ids))
    assert [b.block_id for b in blocks] == ids
    pool.cache(blocks, [base + i for i in range(len(ids))])
    pool.release(blocks)
    return blocks


def test_retained_blocks_are_taken_last_tail_first_and_recorded_for_demotion():
    pool = BlockPool(8)
    session = _cached(pool, [0, 1, 2])         # free queue: 3..7, then 2, 1, 0 (tail-first)
    pool.retain("s", session, tag=("tenant",))
    assert pool.num_retained == 3 and pool.num_free == 8
    assert [b.block_id for b in pool.take(5)] == [3, 4, 5, 6, 7]
    assert pool.demoted == []
    assert [b.block_id for b in pool.take(2)] == [2, 1]          # now the retained, tail first
    assert pool.demoted == [(2, 102, ("tenant",), 2), (1, 101, ("tenant",), 1)]
    assert pool.num_retained == 1 and pool.hold_blocks("s") == 1 and pool.num_retained_evicted == 2
    assert pool.lookup(100).block_id == 0                        # the prefix survived


def test_a_hit_on_a_retained_block_takes_it_out_of_the_retained_queue():
    pool = BlockPool(4)
    session = _cached(pool, [0, 1])
    pool.retain("s", session)
    pool.touch([session[0]])
    assert pool.num_free == 3
    pool.release([session[0]])                                   # back to the retained queue
    assert pool.num_free == 4
    assert [b.block_id for b in pool.take(2)] == [2, 3]


def test_unretain_warm_goes_to_the_tail_cold_to_the_head():
    pool = BlockPool(6)
    a = _cached(pool, [0, 1], base=100)
    b = _cached(pool, [2, 3], base=200)
    pool.retain("a", a)
    pool.retain("b", b)
    pool.unretain("a")                   # its next turn came: most recently used
    pool.unretain("b", cold=True)        # idle past its deadline: first out, last block first
    assert pool.num_retained == 0
    assert [x.block_id for x in pool.take(6)] == [3, 2, 4, 5, 1, 0]


def test_an_ended_sessions_blocks_go_first_even_when_released_later():
    pool = BlockPool(6)
    blocks = pool.take(3)
    pool.cache(blocks, [1, 2, 3])
    pool.mark_cold(blocks, own_refs=1)   # still referenced by the ending turn: cold once released
    pool.release(blocks)
    assert [x.block_id for x in pool.take(3)] == [2, 1, 0]
    pool.release(blocks)                 # taking cleared the mark: to the tail as usual
    assert list(pool._free) == [3, 4, 5, 2, 1, 0]
    pool.mark_cold(blocks)               # free now: to the head at once, the last block first
    assert list(pool._free) == [2, 1, 0, 3, 4, 5]
    pool.touch([blocks[2]])              # a hit warms it again
    pool.release([blocks[2]])
    assert [x.block_id for x in pool.take(6)] == [1, 0, 3, 4, 5, 2]


def test_an_ended_session_leaves_the_blocks_another_request_shares_where_they_are():
    pool = BlockPool(6)
    a = pool.take(3)
    pool.cache(a, [1, 2, 3])
    pool.touch(a[:2])                    # another session shares the first two (a system prompt)
    pool.mark_cold(a, own_refs=1)        # a's session ended: only its own last block goes first
    pool.release(a)
    pool.release(a[:2])                  # the other session's turn ends normally
    assert [x.block_id for x in pool.take(6)] == [2, 3, 4, 5, 1, 0]


def test_a_block_shared_by_two_holds_stays_retained_until_both_end():
    pool = BlockPool(4)
    shared = _cached(pool, [0, 1])
    pool.retain("a", shared)
    pool.retain("b", shared[:1])
    assert pool.new_for_retention(shared) == 0 and pool.num_retained == 2
    pool.unretain("a")
    assert pool.num_retained == 1 and shared[0].retained == 1 and shared[1].retained == 0
    assert [x.block_id for x in pool.take(3)] == [2, 3, 1]        # block 0 still retained: last
    pool.unretain("b")
    pool.unretain("b")                                            # unknown hold: ignored
    assert pool.num_retained == 0


def test_reset_cache_ends_every_hold():
    pool = BlockPool(3)
    pool.retain("s", _cached(pool, [0, 1]))
    assert pool.reset_cache()
    assert pool.num_retained == 0 and pool.num_cached == 0 and pool.num_free == 3


def test_holds_keep_their_blocks_from_requests_of_a_worse_priority_only():
    pool = BlockPool(6)
    assert not pool.protects(10)                                 # no hold: nothing kept
    session = _cached(pool, [0, 1])
    pool.retain("s0", session, priority=0)
    assert pool.protects(10) and pool.protects(1) and not pool.protects(0) and not pool.protects(-1)
    assert pool.num_unretained_free == 4 and pool.num_free == 6
    other = _cached(pool, [2], base=200)
    pool.retain("s10", other, priority=10)                       # a hold as bad as the request
    assert not pool.protects(10) and pool.protects(11)
    pool.unretain("s10")
    pool.unretain("s0")
    assert not pool.protects(10) and pool.num_unretained_free == 6
