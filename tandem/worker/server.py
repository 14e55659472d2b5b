"""The worker's HTTP server: uvicorn's, except that the first SIGTERM drains first
(tandem/worker/drain.py) and only then shuts down. A second SIGTERM, or SIGINT, is uvicorn's
usual immediate shutdown. A worker that drained exits with status 0."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType

import uvicorn

from tandem.worker.drain import WorkerDrain

log = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: WorkerDrain | None) -> None:
        super().__init__(config)
        self._drain = drain
        self._drain_asked = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # runs in the main thread between two bytecodes: only flag and hand over to the loop
        if (sig == signal.SIGTERM and self._drain is not None and not self._drain_asked
                and not self.should_exit and self._loop is not None):
            self._drain_asked = True
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self._drain.run()
        except Exception:   # a failed drain must not keep the worker from stopping
            log.exception("drain failed; stopping")
        finally:
            self.should_exit = True
