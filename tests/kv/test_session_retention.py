"""The session retainer (tandem/kv/session_retention.py) on a bare block pool: holds per session,
learned gaps, the share bound, deadlines, tenant scoping."""

from tandem.config import RetentionConfig
from tandem.kv.block_hash import cache_keys
from tandem.kv.block_pool import BlockPool
from tandem.kv.retention import TurnEnd
from tandem.kv.session_retention import SessionRetainer, session_key
from tandem.types import AgentTurn, RequestContext

CFG = RetentionConfig(share=0.5, default_gap_s=5.0, min_gap_s=1.0, max_s=600.0, alpha=0.5)


def _blocks(pool, n, base):
    blocks = pool.take(n)
    pool.cache(blocks, [base + i for i in range(n)])
    pool.release(blocks)
    return blocks


def test_a_session_key_is_scoped_by_tenant_and_salt():
    a = RequestContext(session_id="agent-1", tenant="key-0")
    b = RequestContext(session_id="agent-1", tenant="key-1")
    assert session_key(a) != session_key(b)
    salted = RequestContext(session_id="agent-1", tenant="key-0", cache_salt="s")
    assert session_key(salted) != session_key(a)
    assert session_key(RequestContext()) is None
    # tenants sharing KV (--share-prefix-cache) have one partition, never one session
    shared_a = RequestContext(session_id="agent-1", tenant="key-0", share_prefix_cache=True)
    shared_b = RequestContext(session_id="agent-1", tenant="key-1", share_prefix_cache=True)
    assert cache_keys(shared_a) == cache_keys(shared_b)
    assert session_key(shared_a) != session_key(shared_b)


def test_next_turn_learns_the_gap_counts_a_hit_and_ends_the_hold():
    pool = BlockPool(16)
    r = SessionRetainer(pool, CFG)
    blocks = _blocks(pool, 4, 100)
    r.finished("s", "key-0", TurnEnd.RETAIN, r.retain_seconds("s", "key-0", _tools()), blocks, (), now=10.0)
    assert pool.num_retained == 4
    r.arrived("s", "key-0", now=12.0)
    assert r.hits == 1 and pool.num_retained == 4                      # held until it is scheduled
    r.finished("s", "key-0", TurnEnd.NONE, 0.0, (), (), now=12.5)      # it ran: the hold ends
    assert pool.num_retained == 0 and pool.num_holds == 0
    assert r.retain_seconds("s", "key-0", _tools()) == 4.0             # 2 + 2 x 1
    assert r.retain_seconds("other", "key-0", _tools()) == 4.0         # the tenant's
    assert r.retain_seconds("other", "key-1", _tools()) == 5.0         # the default
    assert sum(r.gap_counts) == 1 and r.gap_sum == 2.0
    r.arrived("s", "key-0", now=13.0)                                  # no turn ended since
    assert sum(r.gap_counts) == 1


def test_a_hold_expires_at_its_deadline_cold_and_the_late_turn_still_teaches():
    pool = BlockPool(16)
    r = SessionRetainer(pool, CFG)
    blocks = _blocks(pool, 3, 100)
    r.finished("s", None, TurnEnd.RETAIN, 5.0, blocks, (), now=0.0)
    r.expire(4.9)
    assert pool.num_retained == 3
    r.expire(5.0)
    assert pool.num_retained == 0 and r.expired == 1
    assert [b.block_id for b in pool.take(3)] == [2, 1, 0]            # cold: first out
    r.arrived("s", None, now=30.0)                                     # late: the gap is learned
    assert r.hits == 0 and r.retain_seconds("s", None, _tools()) == 60.0


def test_the_share_bound_releases_the_holds_due_latest_then_keeps_a_prefix():
    pool = BlockPool(24)                                               # share 0.5: 12 blocks
    r = SessionRetainer(pool, CFG)
    a, b, c = _blocks(pool, 4, 100), _blocks(pool, 4, 200), _blocks(pool, 6, 300)
    r.finished("a", None, TurnEnd.RETAIN, 10.0, a, (), now=1.0)        # due at 11
    r.finished("b", None, TurnEnd.RETAIN, 60.0, b, (), now=2.0)        # due at 62
    assert pool.num_retained == 8
    r.finished("c", None, TurnEnd.RETAIN, 30.0, c, (), now=3.0)        # due at 33: b, due last, gives way
    assert [pool.hold_blocks(h) for h in "abc"] == [4, 0, 6] and pool.num_retained == 10
    big = _blocks(pool, 14, 400)
    r.finished("d", None, TurnEnd.RETAIN, 20.0, big, (), now=4.0)      # due at 24: c goes, a (11) stays
    assert [pool.hold_blocks(h) for h in "acd"] == [4, 0, 8]           # and d keeps its prefix
    assert [x.retained for x in big] == [1] * 8 + [0] * 6
    e = big[:2] + _blocks(pool, 3, 500)                                # 2 shared with d, 3 new
    r.finished("e", None, TurnEnd.RETAIN, 100.0, e, (), now=5.0)       # due last: nothing gives way
    assert [pool.hold_blocks(h) for h in "ade"] == [4, 8, 2] and pool.num_retained == 12


def test_an_ended_session_drops_its_hold_and_goes_first():
    pool = BlockPool(8)
    r = SessionRetainer(pool, CFG)
    blocks = _blocks(pool, 2, 100)
    r.finished("s", None, TurnEnd.RETAIN, 60.0, blocks, (), now=0.0)
    r.finished("s", None, TurnEnd.ENDED, 0.0, blocks, (), now=1.0)
    assert pool.num_retained == 0
    assert [b.block_id for b in pool.take(2)] == [1, 0]
    r.arrived("s", None, now=2.0)                                      # no retained turn pending
    assert sum(r.gap_counts) == 0


def test_off_with_a_zero_share_and_tables_are_bounded():
    pool = BlockPool(8)
    off = SessionRetainer(pool, RetentionConfig(share=0.0))
    off.finished("s", None, TurnEnd.RETAIN, 60.0, _blocks(pool, 2, 100), (), now=0.0)
    assert pool.num_retained == 0
    small = SessionRetainer(pool, RetentionConfig(max_sessions=2))
    for i in range(3):
        small.finished(f"s{i}", None, TurnEnd.RETAIN, 60.0, _blocks(pool, 1, 200 + 10 * i), (), now=i)
    assert len(small._sessions) == 2 and pool.hold_blocks("s0") == 0


def _tools():
    return AgentTurn(tool_call_markers=("<tool_call>",))


def test_another_tenants_session_with_the_same_id_never_touches_the_hold():
    pool = BlockPool(8)
    r = SessionRetainer(pool, CFG)
    a = RequestContext(session_id="agent-1", tenant="key-0")
    b = RequestContext(session_id="agent-1", tenant="key-1")
    ka, kb = session_key(a), session_key(b)
    r.finished(ka, "key-0", TurnEnd.RETAIN, 60.0, _blocks(pool, 2, 100), cache_keys(a), now=0.0)
    r.arrived(kb, "key-1", now=1.0)                   # key-1's "agent-1": no hold, nothing learned
    r.finished(kb, "key-1", TurnEnd.ENDED, 0.0, [], cache_keys(b), now=1.0)
    assert pool.hold_blocks(ka) == 2 and r.hits == 0 and sum(r.gap_counts) == 0
    r.arrived(ka, "key-0", now=2.0)
    assert r.hits == 1 and pool.num_retained == 2
    assert r.retain_seconds(kb, "key-1", _tools()) == 5.0   # key-1 learned nothing from key-0


def test_an_arrived_turn_keeps_its_hold_until_scheduled_or_a_grace_passes():
    """Under pressure the next turn may wait: its blocks stay retained meanwhile, for at most
    default_gap_s after it arrived (an aborted turn never finishes)."""
    pool = BlockPool(16)
    r = SessionRetainer(pool, CFG)
    r.finished("s", "key-0", TurnEnd.RETAIN, 3.0, _blocks(pool, 4, 100), (), now=10.0)
    r.arrived("s", "key-0", now=12.9)
    r.expire(13.5)                                   # past the turn's own deadline (13.0)
    assert pool.num_retained == 4
    r.expire(12.9 + CFG.default_gap_s + 0.01)
    assert pool.num_retained == 0 and r.expired == 1
