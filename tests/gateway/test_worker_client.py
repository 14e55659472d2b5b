"""Gateway-to-worker calls that must never raise into the request path."""

import asyncio
import logging

import httpx

from tandem.gateway.worker_client import release_kv


def test_release_kv_to_a_dead_worker_is_logged_not_raised(caplog):
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    async def main():
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
            await release_kv(client, "http://127.0.0.1:9", "req-1")

    with caplog.at_level(logging.INFO, logger="tandem.gateway.worker_client"):
        asyncio.run(main())
    assert "could not release KV of req-1" in caplog.text


def test_release_kv_posts_the_request_id():
    seen = []

    def record(request):
        seen.append((request.url.path, request.content))
        return httpx.Response(200, json={"released": "req-2"})

    async def main():
        async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
            await release_kv(client, "http://w", "req-2")

    asyncio.run(main())
    assert seen == [("/internal/kv_release", b'{"request_id":"req-2"}')]
