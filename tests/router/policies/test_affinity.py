from dataclasses import replace

from tandem.router.policies import Affinity, AffinityConfig
from tandem.router.policies.affinity import rendezvous_order, rendezvous_score
from tandem.router.snapshot import RequestInfo, Snapshot, WorkerLoad


def snap(*workers, session="s1", prompt=100, seq=0):
    return Snapshot(tuple(workers), RequestInfo(num_prompt_tokens=prompt, session_id=session, seq=seq))


def w(wid, **kw):
    return WorkerLoad(worker_id=wid, url=wid, role="both", **kw)


WS = (w("http://127.0.0.1:9001"), w("http://127.0.0.1:9002"), w("http://127.0.0.1:9003"))


def test_rendezvous_score_is_stable_across_processes():
    # a fixed value: blake2b is not salted per process like hash()
    assert rendezvous_score("s1", "x") == int.from_bytes(
        __import__("hashlib").blake2b(b"s1\x00x", digest_size=8).digest(), "big")


def test_session_sticks_to_its_rendezvous_worker():
    home = rendezvous_order("s1", WS)[0].worker_id
    for seq in range(5):
        d = Affinity().choose(snap(*WS, seq=seq))
        assert (d.worker_id, d.reason) == (home, "affinity")


def test_removing_a_worker_moves_only_its_sessions():
    sessions = [f"sess-{i}" for i in range(60)]
    before = {s: rendezvous_order(s, WS)[0].worker_id for s in sessions}
    gone = WS[1].worker_id
    ws = (WS[0], replace(WS[1], healthy=False), WS[2])
    moved = 0
    for s in sessions:
        d = Affinity().choose(snap(*ws, session=s))
        if before[s] == gone:
            assert d.reason == "unavailable_fallback"
            assert d.worker_id == rendezvous_order(s, WS)[1].worker_id  # its second choice
            moved += 1
        else:
            assert (d.worker_id, d.reason) == (before[s], "affinity")
    assert 0 < moved < len(sessions)


def test_overloaded_home_spills_to_next_in_order():
    order = [x.worker_id for x in rendezvous_order("s1", WS)]
    loads = {order[0]: 30000, order[1]: 0, order[2]: 0}
    ws = tuple(w(x.worker_id, prefill_tokens=loads[x.worker_id]) for x in WS)
    # bound = max(4096, 1.5 * (30000 + 100) / 3) = 15050 < 30100
    d = Affinity().choose(snap(*ws))
    assert (d.worker_id, d.reason) == (order[1], "overloaded_fallback")
    # a looser factor keeps it home: 3.0 * 30100 / 3 = 30100
    d = Affinity(AffinityConfig(load_factor=3.0)).choose(snap(*ws))
    assert (d.worker_id, d.reason) == (order[0], "affinity")


def test_slack_keeps_sessions_home_at_light_load():
    order = [x.worker_id for x in rendezvous_order("s1", WS)]
    ws = tuple(w(x.worker_id, prefill_tokens=3000 if x.worker_id == order[0] else 0) for x in WS)
    assert Affinity().choose(snap(*ws)).worker_id == order[0]


def test_no_session_uses_fallback_policy():
    ws = (w("a", prefill_tokens=50), w("b"))
    d = Affinity().choose(snap(*ws, session=None))
    assert (d.worker_id, d.policy) == ("b", "token_aware")
