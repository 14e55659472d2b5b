"""The admission gate over a fake fleet of N slots: requests wait when full, leave in fair order,
a client that leaves takes its entry with it, a full tenant queue is 429 with Retry-After."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tandem.errors import QueueTimeout, TenantQueueFull
from tandem.gateway.admission.fair_queue import FairQueueConfig
from tandem.gateway.admission.gate import AdmissionGate
from tandem.gateway.admission.metrics import QueueMetrics
from tandem.types import EngineRequest, RequestContext, RequestDelta, SamplingParams


class Fleet:
    """`slots` requests at a time, and `priority_slots` more for requests of a priority below 10
    (as a worker preempts worse requests for better ones); a flow takes its slot when it starts
    (as pd_flow dispatches before its first await) and holds it until `release` is set."""

    def __init__(self, slots: int, priority_slots: int = 0) -> None:
        self.slots = slots
        self.priority_slots = priority_slots
        self.used = 0
        self.started: list[str] = []
        self.peak = 0

    def has_capacity(self, priority: int = 0, tenant: str = "") -> bool:
        return self.used < self.slots + (self.priority_slots if priority < 10 else 0)

    async def flow(self, name: str, release: asyncio.Event):
        self.used += 1
        self.peak = max(self.peak, self.used)
        self.started.append(name)
        try:
            await release.wait()
            yield RequestDelta(request_id=name, new_token_ids=[1], new_text="x", finished=True)
        finally:
            self.used -= 1


def req(name: str, tenant: str, prompt: int = 10, max_tokens: int = 10, priority: int = 0):
    return EngineRequest(request_id=name, prompt_token_ids=[1] * prompt,
                         sampling=SamplingParams(max_tokens=max_tokens),
                         context=RequestContext(tenant=tenant, priority=priority))


async def consume(gate, fleet, r, release):
    out = []
    async for d in gate.gated(r, fleet.flow(r.request_id, release)):
        out.append(d)
    return out


async def settle():
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_better_priority_passes_worse_ones_waiting_where_the_fleet_has_room_for_it():
    async def main():
        fleet, rel = Fleet(2, priority_slots=1), asyncio.Event()
        gate = AdmissionGate(FairQueueConfig(), fleet.has_capacity, tick_s=0.01)
        tasks = [asyncio.create_task(consume(gate, fleet, req(f"f{i}", "A", priority=10), rel))
                 for i in range(3)]
        await settle()
        assert fleet.started == ["f0", "f1"] and gate.queue.depth("A") == 1
        tasks.append(asyncio.create_task(consume(gate, fleet, req("s", "A", priority=0), rel)))
        await settle()
        # the priority-0 request waited behind nothing: the fleet had room for its priority
        assert fleet.started == ["f0", "f1", "s"] and gate.queue.depth("A") == 1
        rel.set()
        await asyncio.gather(*tasks)
        assert fleet.started[-1] == "f2" and fleet.used == 0 and len(gate.queue) == 0

    asyncio.run(main())


def test_passes_at_once_when_there_is_room_and_waits_when_full():
    async def main():
        fleet, rel = Fleet(2), asyncio.Event()
        gate = AdmissionGate(FairQueueConfig(), fleet.has_capacity, tick_s=0.01)
        tasks = [asyncio.create_task(consume(gate, fleet, req(f"a{i}", "A"), rel)) for i in range(5)]
        await settle()
        assert fleet.started == ["a0", "a1"] and gate.queue.depth("A") == 3
        rel.set()
        results = await asyncio.gather(*tasks)
        assert all(r[-1].finished for r in results)
        assert fleet.peak == 2 and len(gate.queue) == 0 and fleet.used == 0
        await gate.close()
    asyncio.run(main())


def test_small_tenant_overtakes_a_flood_and_priority_orders_within_a_tenant():
    async def main():
        fleet = Fleet(1)
        gate = AdmissionGate(FairQueueConfig(), fleet.has_capacity, tick_s=0.01)
        releases = {}

        def go(name, tenant, priority=0):
            releases[name] = asyncio.Event()
            return asyncio.create_task(consume(gate, fleet, req(name, tenant, priority=priority),
                                               releases[name]))

        tasks = [go("A0", "A")]
        await settle()
        tasks += [go(f"A{i}", "A") for i in range(1, 6)]
        await settle()
        tasks += [go("B0", "B"), go("B1", "B"), go("U", "A", priority=-1)]
        await settle()
        for _ in range(9):           # finish whatever runs, one at a time
            await settle()
            releases[fleet.started[-1]].set()
        await asyncio.gather(*tasks)
        # A and B alternate while both wait (equal tags: the earlier head first); A's urgent
        # request is A's next, ahead of A's own earlier ones, but takes A's turn, not B's
        assert fleet.started == ["A0", "B0", "U", "A1", "B1", "A2", "A3", "A4", "A5"]
        await gate.close()
    asyncio.run(main())


def test_a_client_that_leaves_takes_its_entry_and_nothing_leaks():
    async def main():
        fleet, rel = Fleet(1), asyncio.Event()
        gate = AdmissionGate(FairQueueConfig(), fleet.has_capacity, tick_s=0.01)
        running = asyncio.create_task(consume(gate, fleet, req("r", "A"), rel))
        await settle()
        waiting = [asyncio.create_task(consume(gate, fleet, req(f"w{i}", "B"), rel)) for i in range(3)]
        await settle()
        waiting[1].cancel()
        await settle()
        assert gate.queue.depth("B") == 2
        rel.set()
        await running
        await asyncio.gather(waiting[0], waiting[2])
        assert fleet.started == ["r", "w0", "w2"] and len(gate.queue) == 0 and not gate._transit
        await gate.close()
    asyncio.run(main())


def test_cancelled_right_after_release_ends_its_transit():
    async def main():
        fleet, rel = Fleet(1), asyncio.Event()
        gate = AdmissionGate(FairQueueConfig(), fleet.has_capacity, tick_s=0.01)
        first = asyncio.create_task(consume(gate, fleet, req("r", "A"), rel))
        await settle()
        second = asyncio.create_task(consume(gate, fleet, req("s", "A"), rel))
        third = asyncio.create_task(consume(gate, fleet, req("t", "A"), rel))
        await settle()
        fleet.used = 0          # room appears (a stats poll) ...
        gate.pump()             # ... `s` is released
        second.cancel()         # ... and its client leaves before it runs
        await settle()
        assert fleet.started == ["r", "t"]   # transit ended: the next one went
        rel.set()
        await asyncio.gather(first, third)
        await gate.close()
    asyncio.run(main())


def test_full_tenant_queue_is_429_with_retry_after_others_still_queue():
    async def main():
        fleet, rel = Fleet(1), asyncio.Event()
        registry = CollectorRegistry()
        metrics = QueueMetrics(registry)
        gate = AdmissionGate(FairQueueConfig(max_requests=2), fleet.has_capacity, metrics, tick_s=0.01)
        metrics.watch(lambda: {t: (gate.queue.depth(t), gate.queue.queued_tokens(t))
                               for t in gate.queue.depths()})
        tasks = [asyncio.create_task(consume(gate, fleet, req(f"a{i}", "A"), rel)) for i in range(3)]
        await settle()
        with pytest.raises(TenantQueueFull) as exc:
            await consume(gate, fleet, req("a3", "A"), rel)
        assert exc.value.status == 429 and exc.value.code == "rate_limit_exceeded"
        assert int(exc.value.headers["retry-after"]) >= 1
        assert "your queue at the gateway is full" in exc.value.message
        tasks.append(asyncio.create_task(consume(gate, fleet, req("b0", "B"), rel)))
        await settle()
        text = generate_latest(registry).decode()
        assert 'tandem:gateway_queue_depth{tenant="A"} 2.0' in text
        assert 'tandem:gateway_queue_depth{tenant="B"} 1.0' in text
        assert 'tandem:gateway_queue_rejected_total{reason="queue_full",tenant="A"} 1.0' in text
        rel.set()
        await asyncio.gather(*tasks)
        assert 'tandem:gateway_queue_depth{tenant="A"} 0.0' in generate_latest(registry).decode()
        await gate.close()
    asyncio.run(main())


def test_waiting_past_the_bound_is_503():
    async def main():
        fleet, rel = Fleet(1), asyncio.Event()
        gate = AdmissionGate(FairQueueConfig(max_wait_s=0.05), fleet.has_capacity, tick_s=0.01)
        running = asyncio.create_task(consume(gate, fleet, req("r", "A"), rel))
        await settle()
        with pytest.raises(QueueTimeout) as exc:
            await consume(gate, fleet, req("late", "B"), rel)
        assert exc.value.status == 503 and "retry-after" in exc.value.headers
        assert len(gate.queue) == 0
        rel.set()
        await running
        await gate.close()
    asyncio.run(main())


def test_a_head_without_room_holds_back_only_its_own_tenant():
    # the fleet has room for B (below its share) but none for A: B's request passes A's queue,
    # even when A's head comes first in fair order
    async def main():
        room = {"A": False, "B": True}
        fleet, rel = Fleet(1), asyncio.Event()
        gate = AdmissionGate(FairQueueConfig(), lambda p=0, t="": room[t] or fleet.has_capacity(p, t),
                             tick_s=10.0)
        tasks = [asyncio.create_task(consume(gate, fleet, req(f"a{i}", "A"), rel)) for i in range(3)]
        await settle()
        assert fleet.started == ["a0"] and gate.queue.depth("A") == 2
        tasks.append(asyncio.create_task(consume(gate, fleet, req("b", "B", prompt=1000), rel)))
        await settle()
        assert gate.queue.peek(0.0) is not None and gate.queue.peek(0.0).tenant == "A"  # A first in order
        assert fleet.started == ["a0", "b"] and gate.queue.depth("A") == 2
        rel.set()
        await asyncio.gather(*tasks)
        assert fleet.used == 0 and len(gate.queue) == 0
        await gate.close()
    asyncio.run(main())
