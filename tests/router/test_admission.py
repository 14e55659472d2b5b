import pytest

from tandem.errors import CapacityExceeded, NoHealthyWorker
from tandem.router.admission import AdmissionLimits, admit
from tandem.router.snapshot import RequestInfo, Snapshot, WorkerLoad


def snap(*workers):
    return Snapshot(tuple(workers), RequestInfo(num_prompt_tokens=10))


def w(wid, **kw):
    return WorkerLoad(worker_id=wid, url=wid, role="decode", **kw)


def test_no_live_worker_is_503():
    with pytest.raises(NoHealthyWorker) as e:
        admit(snap(w("a", healthy=False), w("b", draining=True)), AdmissionLimits(), "decode")
    assert e.value.status == 503 and "decode" in e.value.message


def test_all_saturated_is_429_and_partial_saturation_marks_workers():
    lim = AdmissionLimits(max_in_flight=2, max_waiting=5, max_prefill_tokens=100)
    with pytest.raises(CapacityExceeded) as e:
        admit(snap(w("a", in_flight=2), w("b", waiting=5), w("c", healthy=False)), lim, "decode")
    assert e.value.status == 429
    s = admit(snap(w("a", prefill_tokens=100), w("b", in_flight=1)), lim, "decode")
    assert [x.saturated for x in s.workers] == [True, False]
    assert [x.worker_id for x in s.available()] == ["b"]


def test_open_requests_of_a_worse_priority_make_room_over_the_cap_up_to_the_overflow():
    lim = AdmissionLimits(max_in_flight=8)                  # overflow: 2
    sat = lambda **kw: admit(snap(w("a", **kw), w("b")), lim, "decode").workers[0].saturated
    assert sat(in_flight=8) and not sat(in_flight=8, preemptible=1)
    assert sat(in_flight=9, preemptible=1)                  # one worse request: one slot over
    assert not sat(in_flight=9, preemptible=5) and sat(in_flight=10, preemptible=5)   # the overflow bounds it


def test_a_sessions_home_takes_it_over_the_in_flight_cap_by_the_overflow_only():
    lim = AdmissionLimits(max_in_flight=8)                  # overflow: 8 // 4 = 2
    assert lim.home_overflow == 2 and AdmissionLimits(max_in_flight=2).home_overflow == 1
    workers = (w("a", in_flight=9), w("b", in_flight=3))
    home_a = Snapshot(workers, RequestInfo(num_prompt_tokens=10, session_id="s", session_home="a"))
    assert [x.saturated for x in admit(home_a, lim, "decode").workers] == [False, False]
    # no session, or another home: a is at its cap
    assert [x.saturated for x in admit(snap(*workers), lim, "decode").workers] == [True, False]
    # past the overflow, or saturated by another limit, the home is saturated too
    full = (w("a", in_flight=10), w("b", in_flight=3))
    home_full = Snapshot(full, RequestInfo(num_prompt_tokens=10, session_id="s", session_home="a"))
    assert [x.saturated for x in admit(home_full, lim, "decode").workers] == [True, False]
    waiting = Snapshot((w("a", in_flight=1, waiting=128), w("b")),
                       RequestInfo(num_prompt_tokens=10, session_id="s", session_home="a"))
    assert admit(waiting, lim, "decode").workers[0].saturated
    assert [x.saturated for x in admit(home_a, AdmissionLimits(max_in_flight=8, session_overflow=0),
                                       "decode").workers] == [True, False]


def test_a_tenant_below_its_fair_share_goes_over_the_cap_while_another_is_above_its_own():
    from tandem.router.admission import fair_share_overflow
    lim = AdmissionLimits(max_in_flight=8)                  # overflow 2; two workers: 16 slots
    assert fair_share_overflow("small", {"big": 16}, 16, lim) == 2          # share 8 each: 0 < 8 < 16
    assert fair_share_overflow("small", {"big": 9, "small": 7}, 16, lim) == 2
    assert fair_share_overflow("small", {"big": 8, "small": 7}, 16, lim) == 0   # nobody above
    assert fair_share_overflow("big", {"big": 16, "small": 1}, 16, lim) == 0    # above its own
    assert fair_share_overflow("alone", {"alone": 15}, 16, lim) == 0            # no other tenant
    assert fair_share_overflow("c", {"a": 7, "b": 7}, 16, lim) == 2             # share 16/3
    assert fair_share_overflow("small", {"big": 16}, 16, AdmissionLimits(max_in_flight=8,
                                                                          tenant_overflow=False)) == 0
    # admitted over the cap by it, as a session's home is
    snap_full = snap(w("a", in_flight=8), w("b", in_flight=8))
    with pytest.raises(CapacityExceeded):
        admit(snap_full, lim, "decode")
    assert [x.saturated for x in admit(snap_full, lim, "decode", 2).workers] == [False, False]
    assert [x.saturated for x in admit(snap(w("a", in_flight=10), w("b", in_flight=9)), lim, "decode",
                                       2).workers] == [True, False]


def test_below_its_share_a_tenants_own_open_requests_do_not_use_up_its_allowance():
    from tandem.router.admission import fair_allowance
    lim = AdmissionLimits(max_in_flight=8)                  # overflow 2
    assert fair_allowance(2, 3) == 5 and fair_allowance(0, 3) == 0
    # a holds 8 of big's and 3 of small's: 11 open, over cap + overflow, yet small's own 3 count
    # as allowance while it is below its share; b is full of big's
    workers = (w("a", in_flight=11, tenant_open=3), w("b", in_flight=10))
    assert [x.saturated for x in admit(snap(*workers), lim, "decode", 2).workers] == [False, True]
    with pytest.raises(CapacityExceeded):                   # 13 open: 8 + 2 + its own 3 reached
        admit(snap(w("a", in_flight=13, tenant_open=3)), lim, "decode", 2)
    with pytest.raises(CapacityExceeded):                   # at or above its share: no allowance
        admit(snap(*workers), lim, "decode", 0)
