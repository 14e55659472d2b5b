"""A queued batch's events as a server-sent event stream, for clients that would rather listen
than poll or run a webhook receiver:

  GET /client/v4/accounts/{account_id}/ai/batches/{request_id}/events
Each event is `event: <type>` + `data: <Cloudflare's event body>` (as posted to subscribers,
with eventSubscriptionId null): the recorded `cf.workersAi.model.batch.queued` first, a
`tandem.batch.progress` event ({"payload": {"requestId", "total", "succeeded", "failed",
"cancelled"}}) whenever the counts change, then `.succeeded` or `.failed`, then `data: [DONE]`.
The stream reads the durable store, so it works on any gateway sharing the queue. Another
tenant's request_id answers 404 like an unknown one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.auth import owner_of
from tandem.api.errors import workers_ai_error_response
from tandem.api.queue.service import NotFound, QueueService
from tandem.api.responses import SSE_DONE, sse_response
from tandem.asyncq.event import render

PATH = "/client/v4/accounts/{account_id}/ai/batches/{request_id}/events"
PROGRESS = "tandem.batch.progress"


def _sse(event_type: str, body: dict) -> bytes:
    return b"event: " + event_type.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"


def batch_event_routes(service: QueueService, poll_s: float = 0.25) -> list[Route]:
    async def stream(batch_id: str, tenant: str) -> AsyncIterator[bytes]:
        sent: set[str] = set()
        counts = None
        while True:
            # events before the batch: the final event is recorded in the transaction that ends
            # the batch, so once it is read the batch read after it is done (no stale progress
            # event can follow the final one)
            events = await service.queue.batch_events(batch_id, tenant)
            batch = await service.queue.get_batch(batch_id, tenant)
            for event in events:
                if event.id not in sent:
                    sent.add(event.id)
                    yield _sse(event.type.value, render(event, None))
            now = (batch.succeeded, batch.failed, batch.cancelled)
            if now != counts and not batch.done:
                counts = now
                yield _sse(PROGRESS, {"type": PROGRESS, "payload": {
                    "requestId": batch.id, "total": batch.total, "succeeded": now[0],
                    "failed": now[1], "cancelled": now[2]}})
            if batch.done and len(sent) >= 2:   # queued + the final event
                yield SSE_DONE
                return
            await asyncio.sleep(poll_s)

    async def events(request: Request) -> Response:
        account, batch_id = request.path_params["account_id"], request.path_params["request_id"]
        tenant = owner_of(request.scope)
        batch = await service.queue.get_batch(batch_id, tenant)
        if batch is None or batch.account != account:
            return workers_ai_error_response(NotFound(f"no queued request {batch_id} for account "
                                                      f"{account}", param="request_id"))
        return sse_response(stream(batch_id, tenant))

    return [Route(PATH, events, methods=["GET"])]
