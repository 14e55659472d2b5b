"""Priority scheduling (tandem/engine/priority.py in the scheduler): exact order, admission,
preemption, the starvation bound, and priority 0 everywhere scheduling exactly as fcfs."""

import dataclasses
import random

import pytest

from tandem.config import SchedulerConfig
from tandem.engine.engine import Engine
from tandem.engine.prefill_order import PrefillOrder
from tandem.engine.request import Request, RequestStatus
from tandem.engine.scheduler import Scheduler
from tandem.kv.events import KVEventLog
from tandem.kv.kv_cache_manager import KVCacheManager
from tandem.types import EngineRequest, RequestContext, SamplingParams
from tests.conftest import engine_config
from tests.engine.helpers import prompts, tokens


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def _req(rid, n, priority=0, arrival=0.0, first=100, max_tokens=100):
    return Request(rid, list(range(first, first + n)), SamplingParams(max_tokens=max_tokens),
                   context=RequestContext(priority=priority), arrival_time=arrival)


def _sched(policy="priority", num_blocks=100, caching=False, clock=None, order=PrefillOrder(), **cfg):
    cfg.setdefault("max_num_batched_tokens", 100)
    cfg.setdefault("long_prefill_token_threshold", 0)
    return Scheduler(SchedulerConfig(scheduling_policy=policy, **cfg), KVCacheManager(num_blocks, 4, caching),
                     order=order, clock=clock or Clock())


def _advance(out, token=1):
    """What the engine does after executing a step."""
    for s in out.seqs:
        s.request.num_computed_tokens += s.num_new_tokens
        if s.sample:
            s.request.append_token(token)


def _plan(out):
    return [(s.request.request_id, s.num_new_tokens, s.sample) for s in out.seqs]


def _ids(requests):
    return [r.request_id for r in requests]


def test_the_waiting_queue_goes_by_priority_then_arrival():
    for policy, admitted, waiting in (("priority", "e", ["b", "d", "a", "c"]),
                                      ("fcfs", "a", ["b", "c", "d", "e"])):
        sched = _sched(policy, max_num_seqs=1, clock=Clock(5.0))
        for rid, priority, t in (("a", 5, 0.0), ("b", 0, 1.0), ("c", 5, 2.0), ("d", 0, 3.0), ("e", -1, 4.0)):
            sched.add(_req(rid, 4, priority, arrival=t, first=int(100 * t)))
        assert _plan(sched.schedule()) == [(admitted, 4, True)], policy
        assert _ids(sched.waiting) == waiting, policy


def test_within_a_priority_the_prefill_order_still_holds():
    """With the chunk cap: shortest remaining first inside a level, and levels first (under fcfs a
    priority weighs priority_tokens in that key, here less than the long prompt's length)."""
    order = PrefillOrder(priority_tokens=10)
    for policy, want in (("priority", ["short", "long", "tiny"]), ("fcfs", ["short", "tiny", "long"])):
        sched = _sched(policy, long_prefill_token_threshold=50, order=order, clock=Clock(1.0))
        sched.add(_req("long", 40, arrival=0.0))                         # key 40
        sched.add(_req("short", 3, arrival=0.001, first=300))          # key 3 + 1
        sched.add(_req("tiny", 2, priority=1, arrival=0.002, first=500))  # key 2 + 10 + 2
        assert [rid for rid, _, _ in _plan(sched.schedule())] == want, policy


def test_a_better_request_preempts_the_worst_latest_running_one():
    sched = _sched(num_blocks=10)
    x, y, z = _req("x", 8, 5), _req("y", 8, 10, first=200), _req("z", 8, 10, first=300)
    for r in (x, y, z):
        sched.add(r)
    out = sched.schedule()
    assert _plan(out) == [("x", 8, True), ("y", 8, True), ("z", 8, True)]
    _advance(out)
    w = _req("w", 12, 0, first=400)
    sched.add(w)
    out = sched.schedule()
    # the decodes take a third block each (6, 7, 8); w needs 3 blocks and 1 is free: z (priority 10,
    # admitted after y) gives way, its decode taken back out of the step, and w gets 9, 8, 5
    assert _plan(out) == [("x", 1, True), ("y", 1, True), ("w", 12, True)]
    assert out.preempted == [z] and z.status is RequestStatus.WAITING and z.num_computed_tokens == 0
    assert _ids(sched.waiting) == ["z"] and sched.kv.block_ids("z") == []
    assert sched.kv.block_ids("w") == [9, 8, 5]
    assert sched.kv.block_ids("x") == [0, 1, 6] and sched.kv.block_ids("y") == [2, 3, 7]

    fcfs = _sched("fcfs", num_blocks=10)
    for r in (_req("x", 8, 5), _req("y", 8, 10, first=200), _req("z", 8, 10, first=300)):
        fcfs.add(r)
    _advance(fcfs.schedule())
    fcfs.add(_req("w", 12, 0, first=400))
    out = fcfs.schedule()
    assert _plan(out) == [("x", 1, True), ("y", 1, True), ("z", 1, True)] and not out.preempted
    assert _ids(fcfs.waiting) == ["w"]


def test_a_better_request_takes_the_sequence_slot_of_a_worse_one():
    sched = _sched(max_num_seqs=2)
    a, b = _req("a", 4, 0), _req("b", 4, 10, first=200)
    sched.add(a)
    sched.add(b)
    _advance(sched.schedule())
    sched.add(_req("c", 4, 10, first=300))     # no better than b: waits for a slot
    out = sched.schedule()
    assert _plan(out) == [("a", 1, True), ("b", 1, True)] and not out.preempted
    sched.add(_req("d", 4, 1, first=400))      # better than b, not than a
    out = sched.schedule()
    assert _plan(out) == [("a", 1, True), ("d", 4, True)] and out.preempted == [b]
    # b and c wait, b (preempted) first, as in its level's first-come order
    assert _ids(sched.waiting) == ["b", "c"]


def test_nothing_is_preempted_for_a_request_that_would_not_fit_even_then():
    sched = _sched(num_blocks=6)
    a, b = _req("a", 8, 0), _req("b", 8, 10, first=200)
    sched.add(a)
    sched.add(b)
    _advance(sched.schedule())
    sched.add(_req("w", 20, 5, first=300))
    out = sched.schedule()
    # a and b take the last 2 free blocks for their decodes; w needs 5, b's 3 would not do
    assert _plan(out) == [("a", 1, True), ("b", 1, True)] and not out.preempted
    assert _ids(sched.waiting) == ["w"]


def test_block_pressure_preempts_the_worst_priority_not_the_latest_admitted():
    for policy, kept, victim in (("priority", "a", "b"), ("fcfs", "b", "a")):
        sched = _sched(policy, num_blocks=5)
        b = _req("b", 8, 10)
        sched.add(b)
        _advance(sched.schedule())                              # b: blocks 0, 1
        sched.add(_req("a", 8, 0, first=200))
        out = sched.schedule()                                  # b: block 2; a: 3, 4
        assert sorted(_plan(out)) == [("a", 8, True), ("b", 1, True)], policy
        _advance(out)
        out = sched.schedule()
        # a needs a third block and none is free; fcfs takes the latest admitted (a itself)
        assert _plan(out) == [(kept, 1, True)], policy
        assert _ids(out.preempted) == [victim] and _ids(sched.waiting) == [victim], policy


def test_a_worse_decode_already_scheduled_gives_its_blocks_to_a_better_prefill():
    """Decodes go first, so b (priority 10) is scheduled before a's prompt chunk; when that chunk
    finds no block, b is taken back out of the step and preempted."""
    sched = _sched(num_blocks=5, caching=True, max_num_batched_tokens=8)
    b = _req("b", 4, 10)
    sched.add(b)
    _advance(sched.schedule())                                  # b: block 0
    a = _req("a", 16, 0, first=200)
    sched.add(a)
    out = sched.schedule()
    assert _plan(out) == [("b", 1, True), ("a", 7, False)]      # b: block 1; a: 2, 3
    _advance(out)
    out = sched.schedule()
    # a's 7 tokens need a fourth block: b's 1-token decode goes back to the budget and a gets
    # b's blocks (only its prompt block, computed while it was alone, is published)
    assert _plan(out) == [("a", 7, False)] and out.preempted == [b]
    assert sched.kv.block_ids("a") == [2, 3, 4, 1]
    assert set(sched.kv.pool.cached.values()) == {0, 2, 3, 4}


def test_the_blocks_of_a_request_taken_back_out_of_the_step_are_never_published():
    """b's decode would fill its second block; a better prompt needs b's blocks in the same step:
    b is taken back out of it, and the block it would have filled was never offered as a prefix
    (a KV event for it would point the gateway at KV that was never computed)."""
    log = KVEventLog()
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=8, long_prefill_token_threshold=0),
                      KVCacheManager(3, 4, True, events=log), clock=Clock())
    b = _req("b", 7, 10)
    sched.add(b)
    _advance(sched.schedule())                                  # b: blocks 0, 1 (3 tokens in 1)
    sched.add(_req("a", 16, 0, first=200))
    out = sched.schedule()
    assert _plan(out) == [("a", 7, False)] and out.preempted == [b]
    assert sched.kv.block_ids("a") == [2, 1]
    stored = [h for e in log.since(0, tuple).events if e.kind == "stored" for h in e.block_hashes]
    assert len(stored) == 2      # b's first block (step 1) and a's first block, not b's second


def test_a_running_prefill_of_a_worse_priority_leaves_the_step_to_a_better_prompt():
    for policy, want in (("priority", [("hi", 6, True), ("low", 4, False)]), ("fcfs", [("low", 10, False)])):
        sched = _sched(policy, max_num_batched_tokens=10)
        sched.add(_req("low", 40, 10))
        _advance(sched.schedule())
        sched.add(_req("hi", 6, 0, first=300))
        assert _plan(sched.schedule()) == want, policy


def test_only_waiting_requests_of_its_priority_or_better_cap_a_running_prefills_chunk():
    # one sequence slot: "other" waits while "hi" prefills; the chunk cap is 4 of a 20-token step
    for policy, other_priority, want in (("priority", 10, 20), ("priority", 0, 4), ("fcfs", 10, 4)):
        sched = _sched(policy, max_num_batched_tokens=20, long_prefill_token_threshold=4, max_num_seqs=1)
        sched.add(_req("hi", 60, 0))
        _advance(sched.schedule())
        sched.add(_req("other", 8, other_priority, first=300))
        assert _plan(sched.schedule()) == [("hi", want, False)], (policy, other_priority)


def _drive(sched, clock, arrivals=lambda step: (), last_arrival=0, dt=0.1, max_steps=2000):
    """Step as the engine does (token 1 sampled; a request ends at max_tokens) until nothing is
    left after the last arrival, or max_steps; returns {request_id: finish time}."""
    finished = {}
    for step in range(max_steps):
        for r in arrivals(step):
            sched.add(r)
        if not sched.has_work() and step >= last_arrival:
            break
        out = sched.schedule()
        _advance(out)
        for s in out.seqs:
            r = s.request
            if s.sample and len(r.output_token_ids) >= r.sampling.max_tokens:
                sched.finish(r)
                r.status = RequestStatus.FINISHED
                finished[r.request_id] = clock.now
        assert not out.capacity_finished
        clock.now += dt
    return finished


@pytest.mark.parametrize("threshold, bound_s", [(0, 10.0), (256, 20.0)])
def test_a_low_priority_request_under_a_flood_completes_within_the_bound(threshold, bound_s):
    """One slot, a request of priority 0 arriving every 0.1 s and served in 0.2 s (twice as fast
    as the slot serves them): the request of priority 10 waits (10 - 0) * priority_aging_s = 10 s
    and goes next (in arrival order within the level), or with the chunk cap after the priority-0
    prompts that the prefill order's key puts before it: 10 levels * 1000 tokens / 1000 tokens a
    second = 10 s more. Once admitted, at level 0, no priority-0 request preempts it."""
    def run(aging_s, steps):
        clock = Clock()
        sched = _sched(max_num_seqs=1, long_prefill_token_threshold=threshold, clock=clock,
                       priority_aging_s=aging_s)
        low = _req("low", 4, 10, arrival=0.0, max_tokens=2)

        def flood(step):
            return [low] * (step == 0) + [_req(f"f{step}", 4, 0, arrival=clock.now, first=1000 + 4 * step,
                                              max_tokens=2)]
        return _drive(sched, clock, flood, max_steps=steps), low

    finished, low = run(aging_s=1.0, steps=int((bound_s + 1) / 0.1))
    assert bound_s - 1.0 < finished["low"] <= bound_s + 0.5
    assert low.num_preemptions == 0
    never, _ = run(aging_s=1e9, steps=int(2 * bound_s / 0.1))    # no aging: it starves
    assert "low" not in never and len(never) >= bound_s / 0.1 - 1


def _workload(seed):
    """Requests with shared prefixes, arriving over 30 steps, more than the pool holds at once."""
    rng = random.Random(seed)
    shared = list(range(500, 532))
    out = {}
    for i in range(24):
        n = rng.randint(3, 40)
        prompt = (shared[:rng.choice((0, 8, 16, 32))] + list(range(1000 * (i + 1), 1000 * (i + 1) + n)))
        out.setdefault(rng.randint(0, 30), []).append((f"r{i}", prompt, rng.randint(1, 12)))
    return out


@pytest.mark.parametrize("threshold", [0, 8])
@pytest.mark.parametrize("caching", [False, True])
def test_one_priority_everywhere_schedules_exactly_as_fcfs(threshold, caching):
    """Chunked prefill, prefix hits, in-flight prefixes, preemption: step by step the same plans,
    the same preemptions and the same block ids, at priority 0 (and at any one priority)."""
    def trace(policy, priority):
        clock = Clock()
        sched = _sched(policy, num_blocks=24, caching=caching, max_num_batched_tokens=24, max_num_seqs=6,
                       long_prefill_token_threshold=threshold, clock=clock, priority_aging_s=0.5)
        steps = []
        arrivals = _workload(seed=threshold + 10 * caching)

        def arrive(step):
            context = RequestContext(priority=priority)
            return [Request(rid, prompt, SamplingParams(max_tokens=m), context=context, arrival_time=clock.now)
                    for rid, prompt, m in arrivals.get(step, ())]
        real_schedule = sched.schedule

        def schedule():
            out = real_schedule()
            steps.append((_plan(out), _ids(out.preempted),
                          {r.request_id: sched.kv.block_ids(r.request_id) for r in sched.running}))
            return out
        sched.schedule = schedule
        finished = _drive(sched, clock, arrive, last_arrival=max(arrivals))
        assert sched.kv.num_held() == 0 and sched.kv.pool.num_free == 24
        return steps, finished, sched.num_preemptions

    fcfs = trace("fcfs", 0)
    assert fcfs[2] > 0 and len(fcfs[1]) == 24     # the pool is tight enough to preempt
    assert trace("priority", 0) == fcfs
    assert trace("priority", 7) == fcfs


def test_greedy_outputs_are_the_same_whatever_the_priorities(llama_dir, make_engine):
    """A tight pool, worse requests first and better ones arriving while they run: requests are
    preempted and recomputed, their greedy tokens unchanged; every block is free after (checked
    by make_engine)."""
    texts = prompts(8, seed=35, min_len=12, max_len=30)

    def run(priorities):
        engine = make_engine(llama_dir, num_blocks=40, max_num_batched_tokens=32, max_num_seqs=8)
        sampling = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
        reqs = [EngineRequest(request_id=f"p{i}", prompt_token_ids=t, sampling=sampling,
                              context=RequestContext(priority=p)) for i, (t, p) in enumerate(zip(texts, priorities))]
        out = {r.request_id: [] for r in reqs}
        for r in reqs[:4]:
            engine.add_request(r)
        for _ in range(3):
            for d in engine.step():
                out[d.request_id].append(d)
        for r in reqs[4:]:
            engine.add_request(r)
        while engine.requests:
            for d in engine.step():
                out[d.request_id].append(d)
        return {rid: tokens(ds) for rid, ds in out.items()}, engine.scheduler.num_preemptions

    same, _ = run([0] * 8)
    mixed, preemptions = run([10, 10, 5, 10, 0, -1, 0, 3])
    assert preemptions > 0
    assert mixed == same


def test_the_engine_builds_its_scheduler_with_the_configured_policy(llama_dir):
    cfg = engine_config(llama_dir)
    engine = Engine.from_config(dataclasses.replace(
        cfg, scheduler=dataclasses.replace(cfg.scheduler, scheduling_policy="fcfs")))
    try:
        assert not engine.scheduler.by_priority
    finally:
        engine.shutdown()
    with pytest.raises(ValueError, match="scheduling_policy 'lifo'"):
        SchedulerConfig(scheduling_policy="lifo")
