"""The engine requests of one HTTP request, started together and merged into one stream.

An HTTP request becomes k >= 1 engine requests (n choices, a list of prompts). `start()`
opens every backend stream and waits for each one's first delta, so that (a) a TandemError
raised before the first delta (too long, bad value) still becomes a proper HTTP status and
(b) the backend has filled ResponseInfo's headers before the status line goes out.
`deltas()` then yields (index, delta) as they come. `aclose()` closes every backend stream
that is still open, which aborts its engine request and frees its KV blocks; callers must
call it in a `finally`.

Metered (a `RunMeter`, tandem/api/metering.py): `start()` first admits the request under its
rate limit (a refusal raises RateLimited before any backend stream opens), every delta is
observed, and `aclose()` settles its usage, once: the point where it is final.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from tandem.api.backend import Backend, ResponseInfo
from tandem.api.errors import BackendFailure
from tandem.api.metering import RunMeter
from tandem.api.metrics import ServerMetrics
from tandem.api.responses import aclose_quietly
from tandem.types import EngineRequest, FinishReason, RequestDelta

# Queue items of the k > 1 path: (index, delta, error); delta None and error None = ended.
_Item = tuple[int, RequestDelta | None, BaseException | None]


def check_delta(d: RequestDelta) -> RequestDelta:
    """A delta the engine failed (finish_reason error) becomes a 500 for the client."""
    if d.finish_reason is FinishReason.ERROR:
        raise BackendFailure(f"generation failed: {d.error or 'unknown engine error'}")
    return d


def _ended_without_final(request_id: str) -> RequestDelta:
    return RequestDelta(request_id=request_id, new_token_ids=[], new_text="", finished=True,
                        finish_reason=FinishReason.ERROR,
                        error="the backend's stream ended without a final delta")


class GenerationRun:
    def __init__(self, backend: Backend, requests: list[EngineRequest], metrics: ServerMetrics,
                 meter: RunMeter | None = None) -> None:
        assert requests
        self.backend = backend
        self.meter = meter
        self.requests = requests
        self.info = ResponseInfo()
        self._observers = [metrics.observer(r.arrival_time) for r in requests]
        self._gens: list[Any] = []
        self._finished = [False] * len(requests)
        self._buffer: list[tuple[int, RequestDelta]] = []
        self._queue: asyncio.Queue[_Item] | None = None
        self._tasks: list[asyncio.Task] = []

    def _open(self, req: EngineRequest) -> AsyncIterator[RequestDelta]:
        return self.backend.generate(req, self.info)

    def _take(self, i: int, delta: RequestDelta | None) -> RequestDelta:
        """Record a delta (None: the stream ended early) for request i; return what to yield."""
        if delta is None:
            delta = _ended_without_final(self.requests[i].request_id)
        self._observers[i].on_delta(delta, time.monotonic())
        if self.meter is not None:
            self.meter.observe(i, delta)
        if delta.finished:
            self._finished[i] = True
        return delta

    async def start(self) -> None:
        if self.meter is not None:
            await self.meter.admit(self.info)   # RateLimited: nothing opened, nothing counted
        try:
            if len(self.requests) == 1:
                gen = self._open(self.requests[0])
                self._gens.append(gen)
                self._buffer.append((0, self._take(0, await anext(gen, None))))
            else:
                await self._start_many()
        except BaseException:
            await self.aclose()
            raise

    async def _start_many(self) -> None:
        self._queue = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._pump(i, self._open(r)))
                       for i, r in enumerate(self.requests)]
        waiting = set(range(len(self.requests)))
        while waiting:
            i, delta, err = await self._queue.get()
            if err is not None:
                raise err
            waiting.discard(i)
            self._buffer.append((i, self._take(i, delta)))

    async def _pump(self, i: int, gen: AsyncIterator[RequestDelta]) -> None:
        assert self._queue is not None
        try:
            async for delta in gen:
                self._queue.put_nowait((i, delta, None))
                if delta.finished:
                    return
            self._queue.put_nowait((i, None, None))
        except Exception as exc:
            self._queue.put_nowait((i, None, exc))
        finally:
            await aclose_quietly(gen)

    async def deltas(self) -> AsyncIterator[tuple[int, RequestDelta]]:
        """Every delta of every request, the first ones first; ends when all have finished.
        Raises what a backend stream raised after its first delta."""
        buffered, self._buffer = self._buffer, []
        for item in buffered:
            yield item
        if len(self.requests) == 1:
            if not self._finished[0]:
                gen = self._gens[0]
                while True:
                    delta = self._take(0, await anext(gen, None))
                    yield 0, delta
                    if delta.finished:
                        break
            return
        assert self._queue is not None
        while not all(self._finished):
            i, delta, err = await self._queue.get()
            if err is not None:
                raise err
            if not self._finished[i]:
                yield i, self._take(i, delta)

    async def aclose(self) -> None:
        """Close every open backend stream (aborting its request); idempotent."""
        for gen in self._gens:
            await aclose_quietly(gen)
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for i, obs in enumerate(self._observers):
            if not self._finished[i]:
                obs.on_close()
        if self.meter is not None:
            await self.meter.settle()
