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
