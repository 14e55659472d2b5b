"""Cancel a streamed response when its client disconnects, with one asyncio task per stream.

uvicorn (httptools) speaks ASGI 2.3, so Starlette's StreamingResponse watches for the client's
disconnect itself, in an anyio task group per response; at the gateway that cost ~1 ms of CPU
per streamed request (measured: 3.0 -> 1.6 ms per streaming request without it). This
middleware tells Starlette the server speaks 2.4 (so it skips the task group) and keeps the
2.3 behaviour itself: when a response without Content-Length (a stream) starts, one task waits
for `http.disconnect`; if it comes before the body's end, the request's task is cancelled,
exactly as Starlette's cancel scope would, which closes the stream and so the worker calls
(the workers abort the requests). Messages sent after the disconnect are dropped, as uvicorn
drops them.

Invariant: routes read their whole request body before they start a streamed response (the
watcher consumes what `receive` returns from then on).
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _Guard:
    def __init__(self, task: asyncio.Task, receive: Receive, send: Send) -> None:
        self.task = task
        self.receive = receive
        self.downstream = send
        self.watcher: asyncio.Task | None = None
        self.gone = False   # the client left mid-stream and we cancelled the request's task
        self.done = False   # the body's last message was sent

    async def send(self, message: Message) -> None:
        if self.gone:
            return
        kind = message["type"]
        if kind == "http.response.start":
            if not any(k.lower() == b"content-length" for k, _ in message.get("headers", ())):
                self.watcher = asyncio.ensure_future(self._watch())
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.done = True
        await self.downstream(message)

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        if not self.done:
            self.gone = True
            self.task.cancel()


class StreamGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["asgi"] = {**scope.get("asgi", {}), "spec_version": "2.4"}
        task = asyncio.current_task()
        assert task is not None
        guard = _Guard(task, receive, send)
        try:
            await self.app(scope, receive, guard.send)
        except asyncio.CancelledError:
            # ours: the client is gone and nobody else cancelled the task
            if not guard.gone or task.uncancel() > 0:
                raise
        finally:
            if guard.watcher is not None:
                guard.watcher.cancel()
