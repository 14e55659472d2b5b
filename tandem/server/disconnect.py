"""Cancelling work whose client has gone away before the response started.

Once a StreamingResponse runs, Starlette watches for the disconnect itself; before that
(a non-streaming request, or a stream waiting for its first token) nobody does, so the
engine would keep generating for nobody. `until_disconnect` races the work against the
ASGI `http.disconnect` message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from starlette.requests import Request

if TYPE_CHECKING:
    from tandem.server.run import GenerationRun

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the response started; the work was cancelled."""


async def _wait_disconnect(request: Request) -> None:
    # Call only after the body was read: every later ASGI message is a disconnect.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, work: Callable[[], Awaitable[T]]) -> T:
    """Run `work()`; if the client disconnects first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work())
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            # Let the work's `finally` blocks (closing backend streams) finish.
            await asyncio.gather(task, return_exceptions=True)
        watcher.cancel()
    if task.cancelled():
        raise ClientGone()
    return task.result()


async def start_run(request: Request, run: "GenerationRun") -> None:
    """run.start() unless the client leaves first; the run is closed if it does not start."""
    try:
        await until_disconnect(request, run.start)
    except BaseException:
        await run.aclose()
        raise
