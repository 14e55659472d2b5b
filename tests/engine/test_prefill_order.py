"""Prefill order (tandem/engine/prefill_order.py) in the scheduler: exact admission and chunk order."""

from tandem.config import SchedulerConfig
from tandem.engine.prefill_order import PrefillOrder
from tandem.engine.request import Request
from tandem.engine.scheduler import Scheduler
from tandem.kv.kv_cache_manager import KVCacheManager
from tandem.types import KVHandle, RequestContext, SamplingParams


def _req(rid, n, arrival, first=100, **ctx):
    return Request(rid, list(range(first, first + n)), SamplingParams(max_tokens=100),
                   context=RequestContext(**ctx), arrival_time=arrival)


def _advance(out, token=1):
    for s in out.seqs:
        s.request.num_computed_tokens += s.num_new_tokens
        if s.sample:
            s.request.append_token(token)


def _plan(out):
    return [(s.request.request_id, s.num_new_tokens, s.sample) for s in out.seqs]


def _sched(budget=10, threshold=4, caching=False, order=PrefillOrder(), **kw):
    return Scheduler(SchedulerConfig(max_num_batched_tokens=budget, long_prefill_token_threshold=threshold, **kw),
                     KVCacheManager(100, 4, caching), order=order)


def test_key_is_remaining_plus_priority_plus_aged_arrival():
    order = PrefillOrder(aging_tokens_per_s=1000, priority_tokens=500, deadline_window_s=5)
    assert order.key(_req("a", 3, arrival=2.0), 40) == 40 + 2000
    assert order.key(_req("a", 3, arrival=2.0, priority=-1), 40) == 40 - 500 + 2000
    # a deadline 1 s after arrival counts as an arrival 4 s earlier; a far one changes nothing
    assert order.key(_req("a", 3, arrival=2.0, deadline=3.0), 40) == 40 + 1000 * (3.0 - 5)
    assert order.key(_req("a", 3, arrival=2.0, deadline=60.0), 40) == 40 + 2000


def test_short_prompt_admitted_before_an_earlier_long_one():
    sched = _sched()
    sched.add(_req("long", 40, arrival=0.0))
    sched.add(_req("short", 3, arrival=0.001))   # key 3 + 1 = 4 against 40
    out = sched.schedule()
    # short first (capped at 4 while long waits behind it: it needs 3), long gets the rest
    assert _plan(out) == [("short", 3, True), ("long", 7, False)]


def test_arrival_order_without_the_chunk_cap():
    sched = _sched(threshold=0)
    sched.add(_req("long", 40, arrival=0.0))
    sched.add(_req("short", 3, arrival=0.001))
    assert _plan(sched.schedule()) == [("long", 10, False)]


def test_aging_bounds_how_long_a_long_prompt_is_passed():
    """long (40 tokens, t=0) goes before any 3-token prompt arriving more than 37 ms later."""
    sched = _sched(budget=100, threshold=50)
    sched.add(_req("long", 40, arrival=0.0))                  # key 40
    sched.add(_req("s3", 3, arrival=0.050, first=300))        # key 53
    sched.add(_req("s1", 3, arrival=0.010, first=500))        # key 13
    sched.add(_req("s2", 3, arrival=0.020, first=700))        # key 23
    out = sched.schedule()
    assert _plan(out) == [("s1", 3, True), ("s2", 3, True), ("long", 40, True), ("s3", 3, True)]


def test_priority_and_deadline_move_a_prompt_forward():
    sched = _sched(budget=100, threshold=50)
    sched.add(_req("plain", 8, arrival=0.0))
    sched.add(_req("urgent", 8, arrival=0.5, first=300, deadline=1.0))   # as if it came at -4 s
    sched.add(_req("vip", 8, arrival=0.1, first=500, priority=-1))       # 1000 tokens ahead
    sched.add(_req("later", 8, arrival=0.2, first=700, priority=1))
    out = sched.schedule()
    assert [rid for rid, _, _ in _plan(out)] == ["urgent", "vip", "plain", "later"]


def test_running_prefills_get_chunks_shortest_remaining_first():
    sched = _sched(budget=8, threshold=4, order=PrefillOrder(aging_tokens_per_s=0))
    a = _req("a", 40, arrival=0.0)
    sched.add(a)
    out = sched.schedule()
    assert _plan(out) == [("a", 8, False)]          # alone: the whole step
    _advance(out)
    sched.add(_req("b", 10, arrival=1.0, first=300))
    out = sched.schedule()
    # b waits: a leaves the reserve (4) to admission; b is admitted with it
    assert _plan(out) == [("a", 4, False), ("b", 4, False)]
    _advance(out)
    out = sched.schedule()
    # nothing waits: b (6 left) before a (28 left) - in admission order a would take all 8
    assert _plan(out) == [("b", 6, True), ("a", 2, False)]


def test_decodes_still_come_before_every_prefill():
    sched = _sched(budget=8, threshold=4)
    d = _req("d", 3, arrival=5.0)
    sched.add(d)
    _advance(sched.schedule())                       # d's prompt: now it decodes
    sched.add(_req("p", 2, arrival=0.0, first=300))  # an older, tiny prompt
    assert _plan(sched.schedule()) == [("d", 1, True), ("p", 2, True)]


def test_a_cached_prefix_makes_a_long_prompt_short():
    sched = _sched(budget=64, threshold=32, caching=True)
    x = _req("x", 40, arrival=0.0)
    sched.add(x)
    _advance(sched.schedule())
    sched.finish(x)                                  # its 10 blocks stay in the prefix cache
    sched.add(_req("medium", 12, arrival=1.0, first=900))     # key 12 + 1000
    sched.add(_req("resent", 44, arrival=1.001))              # x + 4 tokens: 4 + 1001
    out = sched.schedule()
    assert _plan(out) == [("resent", 4, True), ("medium", 12, True)]


def test_a_request_with_a_kv_handle_counts_as_one_token():
    sched = _sched(budget=100, threshold=50)
    sched.add(_req("prompt", 5, arrival=0.0))
    pulled = _req("pulled", 30, arrival=0.002, first=300)
    pulled.kv_handle = KVHandle("w", "p-1", (0,), 29, {})
    sched.add(pulled)
    # no connector here, so it computes its prompt, but it was ordered as a pull (key 1 + 2 against 5)
    assert [rid for rid, _, _ in _plan(sched.schedule())] == ["pulled", "prompt"]


def _frozen_sched(budget, threshold, **kw):
    """A scheduler whose clock stands still: tenants' usage does not decay between steps."""
    return Scheduler(SchedulerConfig(max_num_batched_tokens=budget, long_prefill_token_threshold=threshold, **kw),
                     KVCacheManager(100, 4, False), clock=lambda: 0.0)


def test_the_tenant_that_took_fewest_tokens_prefills_first_among_equals():
    # budget 12, no chunk cap: big's four prompts (12 tokens each) run; small's arrives after
    sched = _frozen_sched(budget=12, threshold=0)
    for i in range(4):
        sched.add(_req(f"big{i}", 12, arrival=0.0 + i / 1000, first=100 + 20 * i, tenant="big"))
    for _ in range(3):
        _advance(sched.schedule())                   # big took 36 tokens: usage class 2
    sched.add(_req("small", 12, arrival=1.0, first=500, tenant="small"))
    out = sched.schedule()
    # decodes first; small (class 0) is admitted ahead of big's remaining prompt chunks
    plan = _plan(out)
    assert [rid for rid, n, _ in plan if n > 1 or rid == "small"][0] == "small"
    _advance(out)
    out = sched.schedule()
    # running now: small's remaining tokens go before big's prefills
    prefills = [rid for rid, n, _ in _plan(out) if not rid.startswith("big") or n > 1]
    assert prefills[0] == "small"


def test_tokens_not_requests_decide_between_tenants():
    # both tenants run two requests; big's took ten times the tokens: small's new prompt goes first,
    # neither capped by big's waiting prompts nor leaving them a reserve of the step
    sched = _frozen_sched(budget=64, threshold=16, max_num_seqs=8)
    sched.usage.charge("big", 640, 0.0)
    sched.usage.charge("small", 64, 0.0)
    for i in range(2):
        for tenant in ("big", "small"):
            r = _req(f"{tenant}{i}", 1, arrival=i / 1000, first=100 + 10 * i, tenant=tenant)
            sched.add(r)
    _advance(sched.schedule())                       # four one-token prompts: all decode now
    for i in range(2, 4):
        sched.add(_req(f"big{i}", 40, arrival=1.0 + i / 1000, first=300 + 50 * i, tenant="big"))
    sched.add(_req("small2", 40, arrival=2.0, first=700, tenant="small"))
    plan = _plan(sched.schedule())
    prompts = [(rid, n) for rid, n, _ in plan if n > 1]
    assert prompts[0] == ("small2", 40)             # whole, though big's two wait (cap 16)


def test_one_tenant_keeps_the_arrival_order():
    sched = _sched(budget=12, threshold=0)
    for i in range(3):
        sched.add(_req(f"a{i}", 12, arrival=i / 1000, first=100 + 20 * i, tenant="t"))
    _advance(sched.schedule())
    sched.add(_req("late", 12, arrival=1.0, first=500, tenant="t"))
    # a1 is next (whole: it passes the 11 tokens left by one, the step's one decode)
    assert _plan(sched.schedule())[:2] == [("a0", 1, True), ("a1", 12, True)]


def test_a_prompt_over_the_room_by_no_more_than_the_steps_decodes_finishes_in_it():
    # budget 64 (slack at most 8): four decodes, then prompts of 64 and 69 tokens
    sched = _sched(budget=64, threshold=0, max_num_seqs=8)
    for i in range(4):
        sched.add(_req(f"d{i}", 1, arrival=i / 1000, first=100 + i))
    _advance(sched.schedule())
    sched.add(_req("p", 64, arrival=1.0, first=200))
    plan = _plan(sched.schedule())
    assert plan[-1] == ("p", 64, True)               # 60 left + 4 decodes: whole, in one step
    sched = _sched(budget=64, threshold=0, max_num_seqs=8)
    for i in range(4):
        sched.add(_req(f"d{i}", 1, arrival=i / 1000, first=100 + i))
    _advance(sched.schedule())
    sched.add(_req("p", 65, arrival=1.0, first=200))
    assert _plan(sched.schedule())[-1] == ("p", 60, False)   # over by 5 > 4 decodes: chunked


def test_while_a_small_tenants_prompt_is_computed_the_big_ones_chunks_stay_short():
    # budget 40, background chunk 4: big runs three requests (two decoding, one long prompt) and
    # took 200 tokens before (usage class 2 after this step; small none: class 0)
    sched = _frozen_sched(budget=40, threshold=0, background_chunk_tokens=4)
    sched.usage.charge("big", 160, 0.0)
    sched.add(_req("big0", 5, arrival=0.0, first=100, tenant="big"))
    sched.add(_req("big1", 5, arrival=0.001, first=200, tenant="big"))
    sched.add(_req("big2", 100, arrival=0.002, first=300, tenant="big"))
    out = sched.schedule()
    assert _plan(out) == [("big0", 5, True), ("big1", 5, True), ("big2", 30, False)]
    _advance(out)
    sched.add(_req("small", 30, arrival=1.0, first=600, tenant="small"))
    out = sched.schedule()
    # small goes whole; big's prompt (two classes above) takes at most 4 tokens
    assert sorted(_plan(out)) == [("big0", 1, True), ("big1", 1, True), ("big2", 4, False),
                                  ("small", 30, True)]
    _advance(out)
    # small decodes now, no prompt of a lesser class to compute: a whole chunk again
    assert _plan(sched.schedule())[-1] == ("big2", 37, False)


def test_while_a_light_tenant_is_about_a_heavy_ones_prompts_take_half_a_step_together():
    # small took 64 tokens lately and has nothing on the worker now; big (four classes above)
    # prompts take at most half the step together (32 here: the threshold, 16, is less), so
    # small's next prompt waits less
    sched = _frozen_sched(budget=64, threshold=16)
    sched.usage.charge("big", 1000, 0.0)
    sched.usage.charge("small", 64, 0.0)
    sched.add(_req("b", 100, arrival=0.0, first=100, tenant="big"))
    assert _plan(sched.schedule()) == [("b", 32, False)]
    sched = _frozen_sched(budget=64, threshold=16)
    sched.usage.charge("big", 1000, 0.0)
    sched.usage.charge("small", 64, 0.0)
    for i, rid in enumerate("bcd"):
        sched.add(_req(rid, 100, arrival=i / 1000, first=100 + 200 * i, tenant="big"))
    out = sched.schedule()
    assert _plan(out) == [("b", 16, False), ("c", 16, False)]
    _advance(out)
    assert _plan(sched.schedule()) == [("b", 16, False), ("c", 16, False)]
    assert [r.request_id for r in sched.waiting] == ["d"]
    # small long gone (under an eighth of a step lately): whole steps again
    sched = _frozen_sched(budget=64, threshold=16)
    sched.usage.charge("big", 1000, 0.0)
    sched.usage.charge("small", 7, 0.0)
    sched.add(_req("b", 100, arrival=0.0, first=100, tenant="big"))
    assert _plan(sched.schedule()) == [("b", 64, False)]
