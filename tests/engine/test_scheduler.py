"""Scheduler policy on the real cache manager, no model: exact order, budgets, preemption."""

from tandem.config import SchedulerConfig
from tandem.engine.request import Request, RequestStatus
from tandem.engine.scheduler import Scheduler
from tandem.kv.kv_cache_manager import KVCacheManager
from tandem.types import SamplingParams


def _req(rid, n):
    return Request(rid, list(range(100, 100 + n)), SamplingParams(max_tokens=100))


def _advance(sched, out, token=1):
    """What the engine does after executing a step."""
    for s in out.seqs:
        s.request.num_computed_tokens += s.num_new_tokens
        if s.sample:
            s.request.append_token(token)


def _plan(out):
    return [(s.request.request_id, s.num_new_tokens, s.sample) for s in out.seqs]


def test_chunked_prefill_and_decodes_first():
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=10), KVCacheManager(100, 4, False))
    a, b = _req("a", 3), _req("b", 25)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert _plan(out) == [("a", 3, True), ("b", 7, False)]
    _advance(sched, out)
    out = sched.schedule()
    # a decodes (1 token) before b's next chunk takes the rest of the budget
    assert _plan(out) == [("a", 1, True), ("b", 9, False)]
    _advance(sched, out)
    out = sched.schedule()
    assert _plan(out) == [("a", 1, True), ("b", 9, True)]


def test_max_num_seqs_limits_admission():
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=100, max_num_seqs=2),
                      KVCacheManager(100, 4, False))
    for rid in "abc":
        sched.add(_req(rid, 4))
    assert [s.request.request_id for s in sched.schedule().seqs] == ["a", "b"]
    assert [r.request_id for r in sched.waiting] == ["c"]


def test_latest_admitted_is_preempted_and_requeued_first():
    kv = KVCacheManager(5, 4, False)
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=100), kv)
    a, b = _req("a", 8), _req("b", 8)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert _plan(out) == [("a", 8, True), ("b", 8, True)]
    _advance(sched, out)
    # each needs a third block for its 9th token; one is free: a takes it, b gives way
    out = sched.schedule()
    assert _plan(out) == [("a", 1, True)]
    assert out.preempted == [b] and b.status is RequestStatus.WAITING and b.num_preemptions == 1
    assert list(sched.waiting)[0] is b and b.num_computed_tokens == 0
    assert kv.block_ids("b") == [] and kv.block_ids("a") == [0, 1, 4]


def test_request_alone_without_room_is_finished_for_length():
    kv = KVCacheManager(2, 4, False)
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=100), kv)
    a = _req("a", 8)
    sched.add(a)
    _advance(sched, sched.schedule())
    out = sched.schedule()
    assert out.capacity_finished == [a] and not out.seqs


def test_long_prefill_leaves_room_for_a_waiting_prompt():
    config = SchedulerConfig(max_num_batched_tokens=10, long_prefill_token_threshold=4)
    sched = Scheduler(config, KVCacheManager(100, 4, False))
    long = _req("long", 40)
    sched.add(long)
    out = sched.schedule()
    assert _plan(out) == [("long", 10, False)]  # alone: the whole budget
    _advance(sched, out)
    sched.add(_req("short", 3))
    out = sched.schedule()
    # someone waits: the long prompt's chunk leaves room, the short prompt starts at once, and
    # the budget it did not use goes back to the long prompt (nobody waits any more)
    assert _plan(out) == [("long", 7, False), ("short", 3, True)]


def test_short_prompt_does_not_queue_behind_running_long_prefills():
    """Two long prompts already running would take the whole step chunk by chunk; a short one
    arriving meanwhile is admitted in the next step, and the step stays full."""
    config = SchedulerConfig(max_num_batched_tokens=8, long_prefill_token_threshold=4)
    sched = Scheduler(config, KVCacheManager(100, 4, False))
    for rid in ("l1", "l2", "l3"):
        sched.add(_req(rid, 40))
    out = sched.schedule()
    # l3 waits: l1 leaves 4 tokens to admission, l2 takes them (capped), nobody can take more
    assert _plan(out) == [("l1", 4, False), ("l2", 4, False)]
    _advance(sched, out)
    out = sched.schedule()
    assert _plan(out) == [("l1", 4, False), ("l3", 4, False)]
    _advance(sched, out)
    sched.add(_req("short", 2))
    out = sched.schedule()
    # before: l1 and l2 took 4 + 4 tokens while "short" waited for the three long ones to finish;
    # now it is admitted, and l1 (nobody waits any more) takes what it left
    assert _plan(out) == [("l1", 6, False), ("short", 2, True)]
    assert sum(n for _, n, _ in _plan(out)) == config.max_num_batched_tokens
    _advance(sched, out)
    out = sched.schedule()
    assert ("short", 1, True) in _plan(out)   # decoding from the next step


def test_no_reserve_when_nothing_waits_or_no_slot_is_free():
    config = SchedulerConfig(max_num_batched_tokens=8, long_prefill_token_threshold=4, max_num_seqs=1)
    sched = Scheduler(config, KVCacheManager(100, 4, False))
    sched.add(_req("long", 40))
    out = sched.schedule()
    assert _plan(out) == [("long", 8, False)]       # alone: the whole step
    _advance(sched, out)
    sched.add(_req("other", 3))
    out = sched.schedule()
    # the only slot is taken: "other" cannot be admitted, nothing is reserved for it (the
    # per-chunk cap while someone waits still applies)
    assert _plan(out) == [("long", 4, False)]


def test_prompt_sharing_a_prefix_being_computed_waits_for_it():
    """Two sessions with one system prompt: the second is not admitted while the first is still
    computing the shared blocks, then hits all of them; a prompt sharing nothing goes past it."""
    kv = KVCacheManager(100, 4, True)
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=16, long_prefill_token_threshold=0), kv)
    shared = list(range(500, 540))                                     # 10 blocks
    first = Request("first", shared + [1, 2, 3], SamplingParams(max_tokens=4))
    second = Request("second", shared + [7, 8, 9], SamplingParams(max_tokens=4))
    other = _req("other", 5)
    for r in (first, second, other):
        sched.add(r)
    out = sched.schedule()
    # first takes the step's 16 tokens; the 4 blocks it publishes would be second's hit, but its
    # 5th block is still to be computed by first: second waits, and keeps its place in the queue
    assert _plan(out) == [("first", 16, False)]
    _advance(sched, out)
    out = sched.schedule()
    assert _plan(out) == [("first", 16, False)]
    assert [r.request_id for r in sched.waiting] == ["second", "other"]
    _advance(sched, out)
    out = sched.schedule()
    # first's last 11 tokens; second now hits all 10 shared blocks and computes only its own 3
    assert _plan(out) == [("first", 11, True), ("second", 3, True), ("other", 2, False)]
    assert second.num_cached_tokens == 40


def test_blocks_published_in_the_same_step_are_hit_at_once():
    kv = KVCacheManager(100, 4, True)
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=64, long_prefill_token_threshold=0), kv)
    a, b = _req("a", 20), _req("b", 20)     # same tokens, admitted in the same step
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    # a is admitted first and publishes all 5 full blocks in this step: b hits 4 of them (the
    # last token is always computed) and computes 4 tokens, nothing is deferred
    assert _plan(out) == [("a", 20, True), ("b", 4, True)]
    assert b.num_cached_tokens == 16


def test_a_deferred_prompt_does_not_cap_the_running_prefill():
    """The only waiting prompt waits for the running one's prefix: that prefill takes the whole
    step (the chunk cap is for prompts that could be admitted)."""
    kv = KVCacheManager(100, 4, True)
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=16, long_prefill_token_threshold=4), kv)
    shared = list(range(500, 560))
    first = Request("first", shared, SamplingParams(max_tokens=4))
    sched.add(first)
    _advance(sched, sched.schedule())                       # alone: 16 tokens
    sched.add(Request("second", shared + [1, 2], SamplingParams(max_tokens=4)))
    out = sched.schedule()
    assert _plan(out) == [("first", 16, False)]
    assert [r.request_id for r in sched.waiting] == ["second"]


def test_background_prompts_are_computed_in_short_chunks():
    """A background prompt (the queue's priority) takes at most background_chunk_tokens a step even
    with the step to itself; an interactive one, or a merely lower vLLM priority, the whole budget."""
    from tandem.types import RequestContext

    config = SchedulerConfig(max_num_batched_tokens=64, background_chunk_tokens=8, background_priority=10)
    sched = Scheduler(config, KVCacheManager(100, 4, False))
    bg = Request("bg", list(range(100, 140)), SamplingParams(max_tokens=5), context=RequestContext(priority=10))
    low = Request("low", list(range(200, 230)), SamplingParams(max_tokens=5), context=RequestContext(priority=3))
    sched.add(bg)
    out = sched.schedule()
    assert _plan(out) == [("bg", 8, False)]
    _advance(sched, out)
    sched.add(low)
    sched.add(_req("inter", 20))
    out = sched.schedule()
    assert sorted(_plan(out)) == [("bg", 8, False), ("inter", 20, True), ("low", 30, True)]
    off = Scheduler(SchedulerConfig(max_num_batched_tokens=64, background_chunk_tokens=0),
                    KVCacheManager(100, 4, False))
    off.add(Request("bg", list(range(100, 140)), SamplingParams(max_tokens=5), context=RequestContext(priority=10)))
    assert _plan(off.schedule()) == [("bg", 40, True)]
