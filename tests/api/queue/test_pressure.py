"""Interactive requests first: the pressure policy (pure) and the gauge that counts an app's
interactive requests."""

from __future__ import annotations

import asyncio

from tandem.api.queue.pressure import GaugedBackend, InteractiveLoad, PressurePolicy
from tandem.types import EngineRequest, RequestContext, SamplingParams
from tests.api.fakes import FakeBackend


def test_policy_takes_only_below_the_limit_and_preempts_above_it():
    room = {"free": True}
    p = PressurePolicy(interactive_limit=1, pool_headroom=lambda: room["free"])
    idle, one, two = InteractiveLoad(), InteractiveLoad(1, 0, 0), InteractiveLoad(2, 1, 50)
    assert p.can_take(idle) and p.can_take(one) and not p.can_take(two)
    assert p.to_preempt(idle, 3) == 0 and p.to_preempt(one, 3) == 0
    assert p.to_preempt(two, 3) == 3 and p.to_preempt(two, 0) == 0   # above the limit: all yield
    room["free"] = False
    assert not p.can_take(idle)
    assert p.to_preempt(one, 3) == 0                     # nobody waits: the pools may stay full
    assert p.to_preempt(InteractiveLoad(1, 1, 10), 3) == 1   # one waits on full pools: one yields


def request(rid: str, priority: int) -> EngineRequest:
    return EngineRequest(request_id=rid, prompt_token_ids=[0, 70, 71],
                         sampling=SamplingParams(max_tokens=3),
                         context=RequestContext(priority=priority))


def test_gauge_counts_interactive_requests_until_they_leave():
    async def main():
        inner = FakeBackend(reply="abcdef", token_delay=0.01)
        load, events = InteractiveLoad(), []
        gauged = GaugedBackend(inner, 10, load, on_start=lambda: events.append(("start", load.in_flight)),
                               on_end=lambda: events.append(("end", load.in_flight)))
        assert gauged.model_name == "fake-model" and gauged.max_model_len == inner.max_model_len
        background = gauged.generate(request("q", 10), None)
        assert [d.new_text async for d in background] == ["a", "b", "c"]
        assert events == [] and load == InteractiveLoad()    # background work is not counted
        it = gauged.generate(request("i", 0), None)
        first = await anext(it)
        assert first.new_text == "a" and events == [("start", 1)]
        assert load == InteractiveLoad(1, 0, 0)              # its first delta came: not waiting
        await it.aclose()                                    # the client left
        assert load == InteractiveLoad() and events[-1] == ("end", 0)
        assert "i" in inner.aborted and not inner.running   # closing aborted the inner stream
        waiting = gauged.generate(request("w", -1), None)
        task = asyncio.ensure_future(anext(waiting))
        await asyncio.sleep(0)
        assert load == InteractiveLoad(1, 1, 3)              # before its first delta
        await task
        await waiting.aclose()
    asyncio.run(main())
