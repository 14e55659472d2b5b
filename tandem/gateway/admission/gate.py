"""The gateway's flow control: requests over capacity wait in the fair queue (fair_queue.py).

A request passes at once when nothing waits and `has_capacity(priority, tenant)` (capacity.py)
says some worker can take a request of its priority and tenant: one call, nothing queued.
Otherwise it waits on a future in the fair queue, and is released as capacity frees: when a
request that passed the gate ends (its load left the tracker before the gate hears of it), when
a request joins the queue (it may have room that those waiting lack: a better priority, a tenant
below its share), and on a tick every `tick_s` while anything waits (the workers' stats, polled
by the monitor, may show room; waits past max_wait_s end in 503). What is released is the first
tenant's head, in the fair queue's order, that has room for its priority and tenant: a head
without room (its tenant over its share of the slots, or its priority worse than those open)
holds back its own tenant only, not a tenant below its share that has room. A tenant whose
queue is full gets 429 with Retry-After at once.

Invariants:
- One request at a time is "in transit": released but not yet counted by the load tracker.
  Nothing else is released until it is, so the gate never releases more requests than the room
  it saw. The released request routes and dispatches in the same event-loop step that wakes it
  (tandem/gateway/pd_flow.py routes and calls `tracker.dispatch` before its first await), so
  transit ends with a `call_soon` scheduled as it wakes.
- A waiting request whose client leaves (its task is cancelled) is removed from the queue; one
  cancelled just after its release ends its transit. Nothing is left queued or in transit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

from tandem.errors import QueueTimeout, TenantQueueFull
from tandem.gateway.admission.drain_rate import DrainRate
from tandem.gateway.admission.fair_queue import Entry, FairQueue, FairQueueConfig
from tandem.gateway.admission.metrics import QueueMetrics
from tandem.types import EngineRequest, RequestDelta

ANONYMOUS = ""   # the tenant of requests to a gateway without keys


class AdmissionGate:
    def __init__(self, config: FairQueueConfig, has_capacity: Callable[[int, str], bool],
                 metrics: QueueMetrics | None = None, tick_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.queue = FairQueue(config)
        self._has_capacity = has_capacity
        self._metrics = metrics
        self._tick_s = tick_s
        self._clock = clock
        self._drain = DrainRate()
        self._transit = False
        self._ticker: asyncio.Task | None = None

    async def gated(self, req: EngineRequest, flow: AsyncIterator[RequestDelta]
                    ) -> AsyncIterator[RequestDelta]:
        """`flow`'s deltas once the request's turn has come."""
        async with aclosing(flow):
            await self.wait_turn(req)
            try:
                async for d in flow:
                    yield d
            finally:
                self.pump()   # its load left the tracker: room for the next

    async def wait_turn(self, req: EngineRequest) -> None:
        ctx = req.context
        tenant = ctx.tenant or ANONYMOUS
        cost = self.config.cost(len(req.prompt_token_ids) + len(req.resume_output_ids),
                                req.sampling.max_tokens)
        now = self._clock()
        if not self._transit and not len(self.queue) and self._has_capacity(ctx.priority, tenant):
            self._drain.record(now, cost)
            return
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = Entry(tenant, ctx.priority, cost, now, fut)
        if not self.queue.push(entry):
            self._reject(tenant, now, cost)
        if self._metrics is not None:
            self._metrics.queued(tenant)
        self._start_ticker()
        self.pump()   # a better priority than those waiting may have room they lack
        try:
            await fut
        except asyncio.CancelledError:
            if not self.queue.remove(entry) and fut.done() and not fut.cancelled():
                self._end_transit()   # released, then cancelled before it could dispatch
            raise
        finally:
            if self._metrics is not None:
                self._metrics.waited(self._clock() - now)
        asyncio.get_running_loop().call_soon(self._end_transit)

    def pump(self) -> None:
        """Release waiting requests while some tenant's head has room for its priority and
        tenant (one in transit at a time)."""
        def eligible(e: Entry) -> bool:
            return e.item.done() or self._has_capacity(e.priority, e.tenant)   # a done one is dropped

        while not self._transit and len(self.queue):
            now = self._clock()
            entry = self.queue.pop(now, eligible)
            if entry is None:
                return
            if entry.item.done():
                continue
            entry.item.set_result(None)
            self._transit = True
            self._drain.record(now, entry.cost)

    def tick(self) -> None:
        """Expire requests waiting past max_wait_s, then release what fits."""
        now = self._clock()
        for entry in self.queue.expired(now):
            self.queue.remove(entry)
            if self._metrics is not None:
                self._metrics.rejected(entry.tenant, "timeout")
            if not entry.item.done():
                entry.item.set_exception(QueueTimeout(
                    f"waited {now - entry.arrival:.0f} s at the gateway with every worker at "
                    f"capacity (bound {self.config.max_wait_s:g} s); retry later",
                    self._retry_after(entry.tenant, now)))
        self.pump()

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)

    def _end_transit(self) -> None:
        self._transit = False
        self.pump()

    def _reject(self, tenant: str, now: float, cost: int) -> None:
        if self._metrics is not None:
            self._metrics.rejected(tenant, "queue_full")
        c = self.config
        bound = (f"{c.max_requests} requests" if c.max_tokens is None
                 else f"{c.max_requests} requests or {c.max_tokens} tokens")
        raise TenantQueueFull(
            f"every worker is at capacity and your queue at the gateway is full "
            f"({self.queue.depth(tenant)} requests, {self.queue.queued_tokens(tenant)} tokens "
            f"waiting; bound {bound}); retry after the Retry-After seconds",
            self._retry_after(tenant, now))

    def _retry_after(self, tenant: str, now: float) -> int:
        depths = self.queue.depths()
        weights = {t: self.config.weight(t) for t in {*depths, tenant}}
        share = weights[tenant] / sum(weights.values())
        return self._drain.retry_after_s(now, self.queue.queued_tokens(tenant), share,
                                         self.config.max_wait_s)

    def _start_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick_while_waiting())

    async def _tick_while_waiting(self) -> None:
        while len(self.queue):
            await asyncio.sleep(self._tick_s)
            self.tick()
