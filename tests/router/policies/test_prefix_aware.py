from tandem.router.policies import PrefixAware, PrefixAwareConfig
from tandem.router.snapshot import RequestInfo, Snapshot, WorkerLoad

BS = 16


def snap(*workers, prompt=1024, seq=0):
    return Snapshot(tuple(workers), RequestInfo(num_prompt_tokens=prompt, block_size=BS, seq=seq))


def w(wid, **kw):
    return WorkerLoad(worker_id=wid, url=f"http://{wid}", role="prefill", **kw)


def test_longest_prefix_wins_at_equal_load():
    d = PrefixAware().choose(snap(w("a", cached_blocks=8), w("b", cached_blocks=40), w("c")))
    assert (d.worker_id, d.reason) == ("b", "prefix")
    # cost = load + prompt - 16 * cached
    assert d.scores == {"a": 1024 - 128, "b": 1024 - 640, "c": 1024}


def test_prefix_traded_against_queue():
    # b saves 640 tokens but has 700 queued: a (nothing cached, idle) finishes sooner.
    d = PrefixAware().choose(snap(w("a"), w("b", cached_blocks=40, prefill_tokens=700)))
    assert (d.worker_id, d.reason) == ("a", "load")
    # with 600 queued the prefix still pays off
    d = PrefixAware().choose(snap(w("a"), w("b", cached_blocks=40, prefill_tokens=600)))
    assert (d.worker_id, d.reason) == ("b", "prefix")


def test_hotspot_guard_excludes_overloaded_holder():
    # b holds the whole prompt: cost 20000 + 0 beats a's 1000 + 40960, but b's queue is more than
    # 8192 tokens and 2x above a's, so the guard keeps the request off b.
    prompt = 64 * 16 * 40  # 40960 tokens, all cached on b
    a = w("a", prefill_tokens=1000)
    b = w("b", cached_blocks=64 * 40, prefill_tokens=20000)
    guard = PrefixAwareConfig(balance_abs_tokens=8192, balance_rel=2.0)
    d = PrefixAware(guard).choose(snap(a, b, prompt=prompt))
    assert (d.worker_id, d.reason) == ("a", "hotspot")
    off = PrefixAwareConfig(balance_abs_tokens=10**9)
    assert PrefixAware(off).choose(snap(a, b, prompt=prompt)).worker_id == "b"


def test_guard_needs_both_absolute_and_relative_gap():
    prompt = 40960
    # 9000 over the minimum (> abs 8192) but only 1.9x the minimum (< rel 2.0): not a hotspot.
    a = w("a", prefill_tokens=10000)
    b = w("b", cached_blocks=2560, prefill_tokens=19000)
    d = PrefixAware().choose(snap(a, b, prompt=prompt))
    assert (d.worker_id, d.reason) == ("b", "prefix")


def test_no_prefix_anywhere_is_load_with_rotation_on_ties():
    ws = (w("a"), w("b"))
    assert [PrefixAware().choose(snap(*ws, seq=s)).worker_id for s in (0, 1)] == ["a", "b"]
    assert PrefixAware().choose(snap(*ws)).reason == "load"


def test_unhealthy_holder_is_ignored():
    d = PrefixAware().choose(snap(w("a"), w("b", cached_blocks=60, healthy=False)))
    assert (d.worker_id, d.reason) == ("a", "load")


def test_decode_context_counts_as_load():
    a = w("a", cached_blocks=10, decode_tokens=5000)
    b = w("b")
    assert PrefixAware().choose(snap(a, b)).worker_id == "b"
    assert PrefixAware(PrefixAwareConfig(decode_weight=0.01)).choose(snap(a, b)).worker_id == "a"


def test_near_best_loads_within_the_margin_are_equal_and_sessions_decide():
    near = PrefixAware(PrefixAwareConfig(margin_blocks=1, margin_frac=0.1))   # margin 102 tokens
    # both hold the prompt; a's 40 tokens of load (a report's offset, a decode tail) decide nothing
    ws = (w("a", prefill_tokens=40, cached_blocks=64, sessions=1), w("b", cached_blocks=64, sessions=3))
    assert near.choose(snap(*ws)).worker_id == "a"
    # a real gap in load still does
    ws = (w("a", prefill_tokens=400, cached_blocks=64, sessions=1), w("b", cached_blocks=64, sessions=3))
    assert near.choose(snap(*ws)).worker_id == "b"
