"""Interactive requests first: what the queue's dispatcher asks before it takes queued work and
while that work runs.

The app counts its own interactive engine requests with `GaugedBackend`, a thin layer over its
Backend: a request is interactive when its `RequestContext.priority` is below the queue's
background priority (queued work runs at that priority or above; a client that sends a request
at that priority or above asks for background treatment too). The dispatcher then asks:
- `can_take()`: the pools have headroom (the caller's `pool_headroom()`: token-aware load on a
  gateway, engine stats on a single server) and at most `interactive_limit` interactive
  requests are in flight here;
- `to_preempt(running)`: how many running queued jobs must go back to the queue now: all of
  them while more than `interactive_limit` interactive requests are in flight, else one while
  an interactive request still waits for its first token and the pools have no headroom.
An interactive request that starts asks at once (the gauge's `on_start`), before it reaches the
backend, so the preempted jobs' engine requests are aborted in the engine's next step; one that
ends wakes the dispatcher (`on_end`).

The counts are this app's view: several gateways over one pool each see their own interactive
traffic, and share the pool's load through `pool_headroom()`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from tandem.api.backend import Backend, ResponseInfo
from tandem.api.responses import aclose_quietly
from tandem.types import EngineRequest, EngineStats, RequestDelta


@dataclass
class InteractiveLoad:
    """Interactive engine requests in flight in this app; `waiting` of them have no delta yet
    (their prompt is still being computed), holding `waiting_tokens` prompt tokens."""
    in_flight: int = 0
    waiting: int = 0
    waiting_tokens: int = 0


@dataclass(frozen=True)
class PressurePolicy:
    interactive_limit: int            # interactive requests in flight beside which queued work runs
    pool_headroom: Callable[[], bool]

    def can_take(self, load: InteractiveLoad) -> bool:
        return load.in_flight <= self.interactive_limit and self.pool_headroom()

    def to_preempt(self, load: InteractiveLoad, running: int) -> int:
        if running == 0:
            return 0
        if load.in_flight > self.interactive_limit:
            return running
        if load.waiting and not self.pool_headroom():
            return 1
        return 0


class GaugedBackend:
    """`inner` with its interactive requests counted in `load`; everything else passes through.
    `on_start` runs as an interactive request enters (before `inner` sees it), `on_end` once it
    has left (finished, failed or closed)."""

    def __init__(self, inner: Backend, background_priority: int, load: InteractiveLoad,
                 on_start: Callable[[], None], on_end: Callable[[], None]) -> None:
        self.inner = inner
        self.background_priority = background_priority
        self.load = load
        self._on_start = on_start
        self._on_end = on_end

    # Backend attributes, read through: a backend may load its model in start()
    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def max_model_len(self) -> int:
        return self.inner.max_model_len

    @property
    def tokenizer(self):
        return self.inner.tokenizer

    def abort(self, request_id: str) -> None:
        self.inner.abort(request_id)

    def stats(self) -> EngineStats:
        return self.inner.stats()

    def interactive(self, req: EngineRequest) -> bool:
        return req.context.priority < self.background_priority

    def generate(self, req: EngineRequest, info: ResponseInfo | None) -> AsyncIterator[RequestDelta]:
        if not self.interactive(req):
            return self.inner.generate(req, info)
        return self._counted(req, info)

    async def _counted(self, req: EngineRequest, info: ResponseInfo | None) -> AsyncIterator[RequestDelta]:
        load, tokens = self.load, len(req.prompt_token_ids)
        load.in_flight += 1
        load.waiting += 1
        load.waiting_tokens += tokens
        waiting = True
        gen = None
        try:
            self._on_start()
            gen = self.inner.generate(req, info)
            async for delta in gen:
                if waiting:
                    waiting = False
                    load.waiting -= 1
                    load.waiting_tokens -= tokens
                yield delta
        finally:
            if gen is not None:
                await aclose_quietly(gen)   # closing the stream aborts the request now, not at GC
            if waiting:
                load.waiting -= 1
                load.waiting_tokens -= tokens
            load.in_flight -= 1
            self._on_end()
