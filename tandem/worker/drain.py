"""A worker asked to stop (SIGTERM) leaves without losing a request.

1. draining: new generation calls are refused with 503 (tandem/api/drain.py), /internal/stats
   says `draining` and, registered with a gateway, a heartbeat says so too: gateways route
   nothing new here (a call that still arrives is retried by its gateway elsewhere);
2. it waits until idle: no generation call in flight, nothing running or waiting in the engine,
   every KV block free (so a prefill worker's handed-over blocks have been pulled, released or
   have timed out), seen twice one poll apart; at most `timeout_s` (then it goes on: a gateway
   migrates what still streams once the worker is gone);
3. it deregisters from its gateway; then the server shuts down as usual (tandem/worker/server.py).

A second SIGTERM, or SIGINT, stops at once. `DrainConfig.timeout_s` is `tandem serve
--drain-timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrainConfig:
    timeout_s: float = 30.0     # longest wait for in-flight requests before leaving anyway
    poll_s: float = 0.1         # how often idleness is checked


class WorkerDrain:
    """The sequence above over callables: `begin` (refuse new work, tell the gateway), `idle`,
    `leave` (deregister)."""

    def __init__(self, config: DrainConfig, begin: Callable[[], Awaitable[None]],
                 idle: Callable[[], bool], leave: Callable[[], Awaitable[None]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.begin = begin
        self.idle = idle
        self.leave = leave
        self.clock = clock

    async def run(self) -> bool:
        """True when the worker went idle, False when the drain timed out."""
        t0 = self.clock()
        log.warning("draining before stopping (at most %.0f s)", self.config.timeout_s)
        await self.begin()
        idle_seen = 0
        while idle_seen < 2 and self.clock() - t0 < self.config.timeout_s:
            idle_seen = idle_seen + 1 if self.idle() else 0
            if idle_seen < 2:
                await asyncio.sleep(self.config.poll_s)
        drained = idle_seen >= 2
        await self.leave()
        log.warning("drained in %.1f s; stopping" if drained else
                    "drain timed out after %.1f s; stopping with requests still running",
                    self.clock() - t0)
        return drained
