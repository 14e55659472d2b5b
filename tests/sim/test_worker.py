"""A simulated worker's steps against hand-computed step times."""

import pytest

from tandem.config import SchedulerConfig
from tandem.engine.prefill_order import PrefillOrder
from tandem.sim.cost_model import CostModel
from tandem.sim.events import EventLoop
from tandem.sim.hardware import CPU
from tandem.sim.model_spec import LLAMA512
from tandem.sim.request import SimRequest
from tandem.sim.worker import Job, SimWorker
from tandem.types import RequestContext

COST = CostModel(LLAMA512, CPU.scaled(flops=50e9, mem_bw=5e9, step_overhead_s=0.005, seq_overhead_s=0.001))


def worker(loop, capacity=1000):
    return SimWorker("w", "both", loop, COST, SchedulerConfig(), PrefillOrder(), 16, capacity)


def job(req, events, kind="whole", outputs=None):
    return Job(f"{req.request_id}-w", req, kind, outputs or req.output_tokens, 0.0, RequestContext(),
               lambda j, t: events.append(("first", req.request_id, t)),
               lambda j, t: events.append(("token", req.request_id, t)),
               lambda j, t: events.append(("done", req.request_id, t)))


def test_chunked_prefill_then_decode_by_hand():
    loop, events = EventLoop(), []
    w = worker(loop)
    req = SimRequest("a", 0.0, 1000, 3, tuple(range(63)))
    w.submit(job(req, events))
    loop.run()
    s1 = COST.step_time([(512, 0)], 0)            # budget 512: no other prompt waits, no cap
    s2 = COST.step_time([(488, 512)], 1)
    d1 = COST.step_time([(1, 1000)], 1)
    d2 = COST.step_time([(1, 1001)], 1)
    assert [e[0] for e in events] == ["first", "token", "token", "done"]
    assert events[0][2] == pytest.approx(s1 + s2)
    assert events[1][2] == pytest.approx(s1 + s2 + d1)
    assert events[2][2] == pytest.approx(s1 + s2 + d1 + d2)
    assert w.idle() and w.cache.live_blocks() == 0
    assert w.cache.match(tuple(range(62))) == 62    # the prompt's full blocks stay cached


def test_a_repeated_prompt_hits_its_cached_blocks_and_a_short_one_goes_first():
    loop, events = EventLoop(), []
    w = worker(loop)
    first = SimRequest("a", 0.0, 320, 1, tuple(range(20)))
    w.submit(job(first, events))
    loop.run()
    again = SimRequest("b", 0.0, 330, 1, tuple(range(20)) + (99,))
    long = SimRequest("c", 0.0, 2000, 1, tuple(range(100, 225)))
    w.submit(job(long, events))
    w.submit(job(again, events))
    loop.run()
    firsts = [e[1] for e in events if e[0] == "first"]
    assert firsts == ["a", "b", "c"]               # shortest remaining first (tandem's PrefillOrder)
    jobs_hits = w.cache.match(tuple(range(20)))
    assert jobs_hits == 20


def test_blocks_run_out_then_admission_waits():
    loop, events = EventLoop(), []
    w = worker(loop, capacity=40)                  # 640 tokens
    a = SimRequest("a", 0.0, 500, 20, tuple(range(32)))
    b = SimRequest("b", 0.0, 500, 20, tuple(range(100, 132)))
    w.submit(job(a, events))
    w.submit(job(b, events))
    loop.run()
    done = [e for e in events if e[0] == "done"]
    first_b = next(e[2] for e in events if e[0] == "first" and e[1] == "b")
    assert [e[1] for e in done] == ["a", "b"] and first_b > done[0][2]   # b waited for a's blocks
