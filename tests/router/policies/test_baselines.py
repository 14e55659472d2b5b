from tandem.router.policies import LeastRequests, RoundRobin, TokenAware, TokenAwareConfig
from tandem.router.snapshot import RequestInfo, Snapshot, WorkerLoad


def snap(*workers, seq=0, prompt=100):
    return Snapshot(tuple(workers), RequestInfo(num_prompt_tokens=prompt, seq=seq))


def w(wid, **kw):
    return WorkerLoad(worker_id=wid, url=f"http://{wid}", role="both", **kw)


def test_round_robin_cycles_over_available_workers_only():
    ws = (w("a"), w("b", healthy=False), w("c"), w("d", draining=True))
    picks = [RoundRobin().choose(snap(*ws, seq=s)).worker_id for s in range(4)]
    assert picks == ["a", "c", "a", "c"]


def test_least_requests_counts_max_of_gateway_and_reported():
    # a: gateway has 1 open but worker reports 5 (others' traffic); b: 3 open, reports 0.
    d = LeastRequests().choose(snap(w("a", in_flight=1, running=4, waiting=1), w("b", in_flight=3)))
    assert (d.worker_id, d.reason) == ("b", "fewest")
    assert d.scores == {"a": 5.0, "b": 3.0}


def test_least_requests_ties_rotate_with_seq():
    ws = (w("a"), w("b"), w("c"))
    picks = [LeastRequests().choose(snap(*ws, seq=s)).worker_id for s in range(3)]
    assert picks == ["a", "b", "c"]
    assert LeastRequests().choose(snap(*ws)).reason == "tie"


def test_token_aware_prefers_fewest_tokens_not_fewest_requests():
    # a has one huge prompt pending, b has three small decodes.
    a = w("a", prefill_tokens=4000, in_flight=1)
    b = w("b", decode_tokens=900, in_flight=3)
    d = TokenAware().choose(snap(a, b))
    assert (d.worker_id, d.reason) == ("b", "least_tokens")
    assert d.scores == {"a": 4000.0, "b": 900.0}


def test_token_aware_decode_weight_shifts_choice():
    a = w("a", prefill_tokens=1000)
    b = w("b", decode_tokens=3000)
    assert TokenAware().choose(snap(a, b)).worker_id == "a"
    assert TokenAware(TokenAwareConfig(decode_weight=0.25)).choose(snap(a, b)).worker_id == "b"


def test_token_aware_tie_breaks_by_in_flight_then_rotation():
    a, b, c = w("a", in_flight=2), w("b", in_flight=1), w("c", in_flight=1)
    assert TokenAware().choose(snap(a, b, c, seq=0)).worker_id == "b"
    assert TokenAware().choose(snap(a, b, c, seq=2)).worker_id == "c"
    assert TokenAware().choose(snap(a, b, c)).reason == "tie"


def test_token_aware_skips_saturated():
    d = TokenAware().choose(snap(w("a", saturated=True), w("b", prefill_tokens=10**6)))
    assert d.worker_id == "b"
