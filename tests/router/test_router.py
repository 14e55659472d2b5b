import pytest

from tandem.errors import CapacityExceeded, NoHealthyWorker
from tandem.gateway.config import RegistryConfig
from tandem.gateway.registry import Registry
from tandem.router.router import HashMemo, Router, pools_policies, reported_weights
from tandem.kv.block_hash import hash_request_blocks
from tandem.router.admission import AdmissionLimits
from tandem.router.load_tracker import LoadTracker
from tandem.router.policies import make_policy
from tandem.router.prefix_index import STORE, PrefixIndex
from tandem.router.routed_prefixes import RoutedPrefixes


def cluster(roles, policy="default", limits=AdmissionLimits()):
    reg = Registry(RegistryConfig())
    for i, role in enumerate(roles):
        w = reg.add_static(f"http://127.0.0.1:{9000 + i}", role)
        reg.poll_ok(w.url, {"role": role, "kv_layout": {"block_size": 4}}, 0.0)
    index, tracker = PrefixIndex(), LoadTracker()
    decisions = []
    router = Router(reg, index, tracker, pools_policies(make_policy(policy)), limits,
                    on_decision=lambda pool, d: decisions.append((pool, d.reason)))
    return reg, index, tracker, router, decisions


def test_prefix_holder_chosen_and_uncached_estimated():
    reg, index, tracker, router, decisions = cluster(["both", "both"])
    toks = list(range(40))
    index.stored("http://127.0.0.1:9001", hash_request_blocks(toks[:24], 4, (), 0))
    r = router.choose("both", HashMemo(toks, ()), None)
    assert r.worker.url == "http://127.0.0.1:9001"
    assert (r.cached_blocks, r.uncached_tokens) == (6, 16)
    assert decisions == [("both", "prefix")]
    # another tenant's salt shares nothing
    r = router.choose("both", HashMemo(toks, ("other",)), None)
    assert r.cached_blocks == 0


def test_tracker_load_steers_token_aware():
    reg, index, tracker, router, _ = cluster(["prefill", "prefill"], policy="token_aware")
    tracker.dispatch("x", "http://127.0.0.1:9000", pending=500)
    assert router.choose("prefill", HashMemo([1] * 10, ()), None).worker.url == "http://127.0.0.1:9001"


def test_a_new_session_stays_with_its_prefix_beside_a_flood_of_worse_priority():
    # worker 1 holds the tenant's system prompt (24 of 40 tokens) and 2,000 tokens of priority-10
    # prompts: a priority-0 session waits behind none of them there (the worker serves it first)
    reg, index, tracker, router, _ = cluster(["both", "both"])
    toks = list(range(40))
    index.stored("http://127.0.0.1:9001", hash_request_blocks(toks[:24], 4, (), 0))
    for i in range(4):
        tracker.dispatch(f"flood{i}", "http://127.0.0.1:9001", pending=500, priority=10)
    assert router.choose("both", HashMemo(toks, ()), "s1", priority=0).worker.url == "http://127.0.0.1:9001"
    # at the flood's own priority the load counts, and the session goes where none waits
    assert router.choose("both", HashMemo(toks, ()), "s2", priority=10).worker.url == "http://127.0.0.1:9000"


def test_exclude_is_a_preference():
    reg, index, tracker, router, _ = cluster(["decode", "decode"], policy="round_robin")
    ex = frozenset({"http://127.0.0.1:9000"})
    assert {router.choose("decode", HashMemo([1], ()), None, ex).worker.url for _ in range(4)} \
        == {"http://127.0.0.1:9001"}
    reg.mark_dead("http://127.0.0.1:9001")
    assert router.choose("decode", HashMemo([1], ()), None, ex).worker.url == "http://127.0.0.1:9000"


def test_mode_and_errors():
    reg, index, tracker, router, _ = cluster(["prefill", "decode", "both"])
    assert router.mode() == "pd"
    reg.mark_dead("http://127.0.0.1:9001")
    assert router.mode() == "colocated"
    reg.mark_dead("http://127.0.0.1:9002")
    assert router.mode() == "prefill"   # no decode worker: the prefill pool serves whole requests
    reg.poll_ok("http://127.0.0.1:9001", {"role": "decode"}, 1.0)
    reg.mark_dead("http://127.0.0.1:9000")
    assert router.mode() == "decode"    # and the other way round
    reg.mark_dead("http://127.0.0.1:9001")
    with pytest.raises(NoHealthyWorker):
        router.mode()
    with pytest.raises(NoHealthyWorker):
        Router(Registry(RegistryConfig()), PrefixIndex(), LoadTracker(), {}, AdmissionLimits()).mode()


def test_saturated_pool_is_429():
    reg, index, tracker, router, _ = cluster(["both"], limits=AdmissionLimits(max_in_flight=1))
    tracker.dispatch("x", "http://127.0.0.1:9000", pending=1)
    with pytest.raises(CapacityExceeded):
        router.choose("both", HashMemo([1], ()), None)


def test_the_router_reads_any_worker_table_that_has_the_view():
    """No gateway registry: a plain table of workers (as a simulator would keep) is enough."""
    from dataclasses import dataclass, field

    @dataclass
    class SimWorker:
        url: str
        role: str = "both"
        healthy: bool = True
        draining: bool = False
        stats: dict = field(default_factory=dict)
        block_size: int | None = 4
        hash_seed: int = 0

    class Table:
        def __init__(self, workers):
            self.workers = workers

        def pool(self, role):
            return [w for w in self.workers if w.role == role]

        def has_live(self, role):
            return any(w.healthy and not w.draining for w in self.pool(role))

    table = Table([SimWorker("a"), SimWorker("b", stats={"num_waiting": 5}), SimWorker("c", healthy=False)])
    index = PrefixIndex()
    index.stored("b", hash_request_blocks(list(range(8)), 4, (), 0))
    router = Router(table, index, LoadTracker(), pools_policies(make_policy("prefix_aware")), AdmissionLimits())
    assert router.mode() == "colocated"
    route = router.choose("both", HashMemo(list(range(12)), ()), None)
    assert (route.worker.url, route.cached_blocks, route.uncached_tokens) == ("b", 2, 4)


def test_a_look_without_commit_is_neither_counted_nor_advances_round_robin():
    reg, index, tracker, router, decisions = cluster(["decode", "decode"], policy="round_robin")
    memo = HashMemo([1, 2, 3], ())
    first = router.choose("decode", memo, None, commit=False)
    again = router.choose("decode", memo, None, commit=False)
    assert first.worker.url == again.worker.url == "http://127.0.0.1:9000" and decisions == []
    assert (first.load.worker_id, first.request.num_prompt_tokens) == ("http://127.0.0.1:9000", 3)
    router.commit("decode", first)
    assert len(decisions) == 1
    assert router.choose("decode", memo, None).worker.url == "http://127.0.0.1:9001"
    assert len(decisions) == 2


def test_also_adds_the_workers_of_other_roles_under_the_pools_policy_and_counter():
    reg, index, tracker, router, decisions = cluster(["decode", "both", "prefill"], policy="round_robin")
    memo = HashMemo([1, 2, 3], ())
    picked = [router.choose("decode", memo, None, also=("both",)).worker.url for _ in range(4)]
    assert picked == ["http://127.0.0.1:9000", "http://127.0.0.1:9001"] * 2
    assert {router.choose("decode", memo, None).worker.url for _ in range(3)} == {"http://127.0.0.1:9000"}
    assert {pool for pool, _ in decisions} == {"decode"}


def test_a_session_is_bound_when_committed_and_its_turns_follow():
    reg, index, tracker, router, decisions = cluster(["both", "both"])
    first = list(range(20))
    look = router.choose("both", HashMemo(first, ()), "conv-1", commit=False)
    assert look.request.session_home is None and router.sessions.home("both", "conv-1") is None
    router.commit("both", look)
    home = look.worker.url
    assert router.sessions.home("both", "conv-1") == home
    # the next turn, before any KV event reached the index: its home, counted as one session
    r = router.choose("both", HashMemo(first + [7] * 12, ()), "conv-1")
    assert (r.worker.url, r.decision.reason, r.load.sessions) == (home, "affinity", 1)
    # a second conversation: the other worker, which holds fewer sessions
    r = router.choose("both", HashMemo(list(range(100, 120)), ()), "conv-2")
    assert r.worker.url != home and r.decision.reason == "new_load"
    assert decisions == [("both", "new_load"), ("both", "affinity"), ("both", "new_load")]


def test_a_sessions_last_turn_goes_home_and_then_the_session_no_longer_counts():
    reg, index, tracker, router, decisions = cluster(["both", "both"])
    first = list(range(20))
    home = router.choose("both", HashMemo(first, ()), "conv-1").worker.url
    last = router.choose("both", HashMemo(first + [7] * 12, ()), "conv-1", session_ends=True)
    assert (last.worker.url, last.decision.reason) == (home, "affinity")
    assert last.request.session_ends
    assert router.sessions.home("both", "conv-1") is None and router.sessions.counts("both") == {}
    # without a session there is nothing to end
    r = router.choose("both", HashMemo(list(range(50, 70)), ()), None, session_ends=True)
    assert not r.request.session_ends


def test_a_tenant_below_its_fair_share_is_placed_over_the_cap_that_refuses_the_big_one():
    reg, index, tracker, router, _ = cluster(["both", "both"], limits=AdmissionLimits(max_in_flight=4))
    for i in range(8):
        tracker.dispatch(f"big{i}", f"http://127.0.0.1:{9000 + i % 2}", pending=10, tenant="big")
    with pytest.raises(CapacityExceeded):
        router.choose("both", HashMemo([1] * 10, ()), None, tenant="big")
    r = router.choose("both", HashMemo([1] * 10, ()), None, tenant="small")
    tracker.dispatch("small0", r.worker.url, pending=10, tenant="small")
    router.choose("both", HashMemo([1] * 10, ()), None, tenant="small")   # 1 of its share of 4: again


def test_a_routed_prompt_counts_as_cached_before_its_kv_events():
    # eight sessions sharing a system prompt, sent one after another faster than the KV events
    # are polled: the router's own routes tell where the prompt is, and they spread four and four
    reg, index, tracker, _, decisions = cluster(["both", "both"])
    router = Router(reg, index, tracker, pools_policies(make_policy("default")), AdmissionLimits(),
                    on_decision=lambda pool, d: decisions.append((pool, d.reason)),
                    routed=RoutedPrefixes())
    system = list(range(200))
    first = router.choose("both", HashMemo(system + [1000], ()), "s0")
    second = router.choose("both", HashMemo(system + [1001], ()), "s1")
    assert second.worker.url == first.worker.url and second.cached_blocks == 50
    assert decisions[1] == ("both", "new_prefix")
    for i in range(2, 8):
        router.choose("both", HashMemo(system + [1000 + i], ()), f"s{i}")
    assert sorted(router.sessions.counts("both").values()) == [4, 4]
    # without the table the second session saw nothing cached and went by load
    reg, index, tracker, plain, decisions = cluster(["both", "both"])
    plain.choose("both", HashMemo(system + [1000], ()), "s0")
    assert plain.choose("both", HashMemo(system + [1001], ()), "s1").cached_blocks == 0


@pytest.mark.parametrize("report,chosen", [(None, 1), ([0.01, 0.04, 0.1], 1), ([0.01, 0.04, 2.5], 0)])
def test_a_store_hit_is_worth_what_the_worker_says_loading_it_costs(report, chosen):
    """Worker 9000 holds the prompt's first 24 tokens and has a queue; the store holds all 40.
    A worker whose cost model finds store reads slower than computing (weight 2.5) will compute
    the whole prompt, so the holder wins; with the defaults or a cheap store the idle one does."""
    reg, index, tracker, router, decisions = cluster(["both", "both"])
    toks = list(range(40))
    index.stored("http://127.0.0.1:9000", hash_request_blocks(toks[:24], 4, (), 0))
    index.stored(STORE, hash_request_blocks(toks, 4, (), 0))
    tracker.dispatch("queued", "http://127.0.0.1:9000", pending=12)
    stats = {"role": "both", "kv_layout": {"block_size": 4}}
    if report is not None:
        stats["kv_tier_weights"] = report
    reg.poll_ok("http://127.0.0.1:9001", stats, 1.0)
    r = router.choose("both", HashMemo(toks, ()), None)
    assert r.worker.url == f"http://127.0.0.1:{9000 + chosen}"


def test_reported_weights_are_read_only_when_well_formed():
    assert reported_weights([0, 0.5, 3]) == (0.0, 0.5, 3.0)
    for bad in (None, "0.1", [0.1, 0.2], [0.1, 0.2, -1], [0.1, 0.2, True], [0.1, 0.2, float("nan")],
                {"store": 0.1}):
        assert reported_weights(bad) is None, bad
