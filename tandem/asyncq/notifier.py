"""The notifier: posts the outbox's due deliveries to their subscribers' URLs, signed, with
retries and exponential backoff, and dead-letters a delivery after its last attempt.

Invariants:
- At least once: a delivery leaves PENDING only after a 2xx answer (DELIVERED) or its last
  attempt (DEAD); a notifier that dies mid-post leaves it due again when its lease ends. A
  receiver deduplicates by the `x-tandem-delivery` header (stable across attempts).
- Attempt k (1-based) that fails is retried after min(backoff_max_s, backoff_base_s * 2^(k-1)).
- Several notifiers (one per gateway) may share a store: a delivery is leased to one at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from tandem.asyncq.event import Delivery, render
from tandem.asyncq.queue import JobQueue
from tandem.asyncq.signature import HEADER, sign

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NotifierConfig:
    max_attempts: int = 12          # with the defaults, a receiver may be down for ~30 minutes
    backoff_base_s: float = 1.0
    backoff_max_s: float = 600.0
    timeout_s: float = 10.0         # one POST
    lease_s: float = 60.0           # > timeout_s: a delivery is not posted twice at once
    take_batch: int = 16
    idle_poll_s: float = 1.0


def backoff_s(cfg: NotifierConfig, attempt: int) -> float:
    return min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (attempt - 1))


class Notifier:
    def __init__(self, queue: JobQueue, config: NotifierConfig,
                 client: httpx.AsyncClient | None = None) -> None:
        if config.lease_s <= config.timeout_s:
            raise ValueError("lease_s must exceed timeout_s")
        self._queue = queue
        self._cfg = config
        self._client = client        # our own made at the first delivery: httpx costs ~0.1-0.2 s
        self._own_client = client is None   # to import, which a server's start-up need not pay
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="asyncq-notifier")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await self._task
        if self._own_client and self._client is not None:
            await self._client.aclose()

    async def deliver_due(self) -> int:
        """Post every delivery due now (one take); -> how many were attempted."""
        due = await self._queue.take_deliveries(self._cfg.take_batch, self._cfg.lease_s)
        await asyncio.gather(*(self._attempt(d) for d in due))
        return len(due)

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                if await self.deliver_due():
                    continue
            except Exception:
                log.exception("asyncq: delivering events failed")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._cfg.idle_poll_s)
            except asyncio.TimeoutError:
                pass

    async def _attempt(self, delivery: Delivery) -> None:
        body = orjson.dumps(render(delivery.event, delivery.subscription_id))
        headers = {"content-type": "application/json",
                   HEADER: sign(delivery.secret, body, int(time.time())),
                   "x-tandem-delivery": delivery.id,
                   "x-tandem-delivery-attempt": str(delivery.attempts)}
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._cfg.timeout_s)
        try:
            response = await self._client.post(delivery.url, content=body, headers=headers)
            error = None if response.is_success else f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            await self._queue.finish_delivery(delivery, True, None, None)
            return
        last = delivery.attempts >= self._cfg.max_attempts
        if last:
            log.warning("asyncq: event %s to %s dead-lettered after %d attempts: %s",
                        delivery.event.type.value, delivery.url, delivery.attempts, error)
        await self._queue.finish_delivery(
            delivery, False, error, None if last else backoff_s(self._cfg, delivery.attempts))
