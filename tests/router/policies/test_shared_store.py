"""Routing with a shared KV store: a prefix every worker can load is cheap anywhere, so the
least-loaded worker takes it instead of the holder (exact scores)."""

from tandem.router.policies import Combined, PrefixAware, PrefixAwareConfig
from tandem.router.policies.prefix_value import TierWeights
from tandem.router.snapshot import RequestInfo, Snapshot, WorkerLoad

BS = 16


def snap(*workers, prompt=200, shared=0, session=None, home=None):
    return Snapshot(tuple(workers), RequestInfo(num_prompt_tokens=prompt, block_size=BS,
                                                shared_blocks=shared, session_id=session,
                                                session_home=home))


def w(wid, **kw):
    return WorkerLoad(worker_id=wid, url=f"http://{wid}", role="both", **kw)


def test_the_holder_wins_without_the_store_and_the_idle_worker_with_it():
    holder, idle = w("a", cached_blocks=10, prefill_tokens=100), w("b")
    d = PrefixAware().choose(snap(holder, idle))
    # a: 100 queued + (200 - 160) to compute; b: nothing queued, all 200 to compute
    assert (d.worker_id, d.reason, d.scores) == ("a", "prefix", {"a": 140.0, "b": 200.0})
    d = PrefixAware().choose(snap(holder, idle, shared=10))
    # b loads the 160 shared tokens at a tenth of their compute: 40 + 16
    assert (d.worker_id, d.reason) == ("b", "store")
    assert d.scores == {"a": 140.0, "b": 56.0}


def test_the_load_weight_decides_when_queues_are_close():
    holder, other = w("a", cached_blocks=10, prefill_tokens=10), w("b")
    d = PrefixAware().choose(snap(holder, other, shared=10))
    assert (d.worker_id, d.reason, d.scores) == ("a", "prefix", {"a": 50.0, "b": 56.0})
    free = PrefixAware(PrefixAwareConfig(tiers=TierWeights(store=0.0))).choose(snap(holder, other, shared=10))
    assert (free.worker_id, free.scores) == ("b", {"a": 50.0, "b": 40.0})


def test_a_store_prefix_shorter_than_the_holders_still_counts():
    a, b = w("a", cached_blocks=10, prefill_tokens=50), w("b", prefill_tokens=0)
    d = PrefixAware().choose(snap(a, b, shared=4))
    # a: 50 + 40; b: (200 - 64) + 0.1 * 64
    assert d.scores == {"a": 90.0, "b": 142.4} and (d.worker_id, d.reason) == ("a", "prefix")


def test_sessions_leave_their_home_when_the_store_holds_their_history():
    busy = (w("a", cached_blocks=10, prefill_tokens=300), w("b"))
    assert Combined().choose(snap(*busy, session="s1", home="a")).reason == "affinity"
    d = Combined().choose(snap(*busy, session="s1", home="a", shared=10))
    assert (d.worker_id, d.reason) == ("b", "session_store")
    # the home holds more than the store yet (the store's events lag): affinity stays
    assert Combined().choose(snap(*busy, session="s1", home="a", shared=6)).reason == "affinity"
