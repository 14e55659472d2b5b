"""How a request's work meets its client's disconnect: one guard per request, and the routes'
long loops in tasks of their own.

DisconnectGuard (installed by tandem.api.app.build_app, outermost) cancels a request whose
client disconnected, with one asyncio task per request. After a route has read its request
body, the only ASGI message left to receive is `http.disconnect` (uvicorn gives it when the
client closes the connection, or once the response is complete); unless somebody waits for it,
a request whose client left goes on generating for nobody. Starlette's StreamingResponse waits
for it in an anyio task group per response (ASGI 2.3 servers such as uvicorn), ~1 ms of CPU per
streamed request at the gateway; racing a non-streaming route's work against a watcher costs
two more tasks.

The guard waits for it once per request: when the request body's last message has been
received, or when a response without Content-Length (a stream) starts, whichever comes first,
one task waits for `http.disconnect`. If it comes before the response's last body message was
sent, the request's task is cancelled, as Starlette's cancel scope would do. The cancellation
lands in the route's `await`; GenerationRun.start() and the routes' `finally: run.aclose()`
close the backend streams, so the engine aborts the requests and frees their blocks. Messages
sent after that are dropped, as uvicorn drops them. The guard tells Starlette the server speaks
ASGI 2.4, so StreamingResponse skips its own task group.

`in_own_task` runs a route's loop over deltas or stream chunks in a task of its own (cheaper,
see there); cancelling the request's task reaches it.

Invariants:
- routes read their whole request body before they start a streamed response (the watcher
  consumes what `receive` returns from then on);
- one guard per request: a guard inside another guard passes the request through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

T = TypeVar("T")

_GUARDED = "tandem.disconnect_guard"   # scope key set by the guard that watches the request


class _Watch:
    """One request: the wrapped receive/send and the disconnect watcher."""

    def __init__(self, task: asyncio.Task, receive: Receive, send: Send) -> None:
        self.task = task
        self.upstream_receive = receive
        self.upstream_send = send
        self.watcher: asyncio.Task | None = None
        self.gone = False   # the client left before the response's end; we cancelled the task
        self.done = False   # the response's last body message was sent

    async def receive(self) -> Message:
        message = await self.upstream_receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            self._start()
        return message

    async def send(self, message: Message) -> None:
        if self.gone:
            return
        kind = message["type"]
        if kind == "http.response.start":
            if not any(k.lower() == b"content-length" for k, _ in message.get("headers", ())):
                self._start()
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.done = True
        await self.upstream_send(message)

    def _start(self) -> None:
        if self.watcher is None and not self.done:
            self.watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while (await self.upstream_receive())["type"] != "http.disconnect":
            pass
        if not self.done:
            self.gone = True
            self.task.cancel()


class DisconnectGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _GUARDED in scope:
            await self.app(scope, receive, send)
            return
        scope[_GUARDED] = True
        scope["asgi"] = {**scope.get("asgi", {}), "spec_version": "2.4"}
        task = asyncio.current_task()
        assert task is not None
        watch = _Watch(task, receive, send)
        try:
            await self.app(scope, watch.receive, watch.send)
        except asyncio.CancelledError:
            # ours: the client is gone and nobody else cancelled the task
            if not watch.gone or task.uncancel() > 0:
                raise
        finally:
            if watch.watcher is not None:
                watch.watcher.cancel()


async def in_own_task(work: Coroutine[Any, Any, T]) -> T:
    """`await work`, run in a task of its own (for a loop over many deltas or stream chunks).

    Every resume of a coroutine passes through each frame above it, and a route runs ~20
    frames deep under uvicorn and Starlette: a loop resumed once per token is cheaper in a
    fresh task than the task costs (fake backend, 256 tokens: ~0.6 ms less CPU per request).
    Cancelling the caller cancels the task (asyncio cancels what a task waits on), and the
    caller resumes once the work's `finally` blocks have run.
    """
    return await asyncio.ensure_future(work)
