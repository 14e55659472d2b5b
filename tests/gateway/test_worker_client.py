"""Gateway-to-worker calls over the gateway's HTTP client and a real socket: deltas, the
split between the caller's errors and worker failures, and best-effort KV release."""

import asyncio
import logging

import orjson
import pytest

from tandem.api.internal import wire
from tandem.errors import TandemError
from tandem.gateway.worker_client import WorkerFailed, release_kv, stream_generate
from tandem.http.client import HTTPClient
from tandem.launcher.cluster import free_port
from tandem.types import EngineRequest, FinishReason, RequestDelta, SamplingParams
from tests.gateway.raw_server import (
    CHUNKED_HEAD,
    LAST_CHUNK,
    RawServer,
    chunk,
    json_answer,
)

REQ = EngineRequest("r1", [1, 2, 3], SamplingParams(max_tokens=2))


def line(**kw) -> bytes:
    d = RequestDelta(request_id="r1", new_token_ids=kw.pop("ids", []), new_text="", **kw)
    return orjson.dumps(wire.delta_to_dict(d)) + b"\n"


async def collect(handler):
    async with RawServer(handler) as srv:
        client = HTTPClient()
        try:
            return [d async for d in stream_generate(client, srv.url, REQ)], srv
        finally:
            await client.aclose()


def test_deltas_arrive_and_the_request_is_sent_as_wire_json():
    async def worker(path, body, reader, writer):
        writer.write(CHUNKED_HEAD + chunk(line(ids=[7])) + chunk(line(
            ids=[8], finished=True, finish_reason=FinishReason.LENGTH)) + LAST_CHUNK)

    deltas, srv = asyncio.run(collect(worker))
    assert [d.new_token_ids for d in deltas] == [[7], [8]]
    assert deltas[-1].finished and deltas[-1].finish_reason is FinishReason.LENGTH
    path, body = srv.requests[0]
    assert path == "/internal/generate"
    assert wire.request_from_dict(orjson.loads(body)).prompt_token_ids == [1, 2, 3]


@pytest.mark.parametrize("status,hard,error", [
    (400, None, TandemError), (503, False, WorkerFailed), (429, False, WorkerFailed)])
def test_error_statuses(status, hard, error):
    async def worker(path, body, reader, writer):
        writer.write(json_answer(status, b'{"error":{"message":"no","param":"messages",'
                                         b'"type":"invalid_request_error","code":"x"}}'))

    with pytest.raises(error) as info:
        asyncio.run(collect(worker))
    if error is TandemError:   # the caller's fault: the worker's error, as it was
        assert (info.value.status, info.value.param, info.value.code) == (400, "messages", "x")
    else:
        assert info.value.hard is hard


def test_broken_stream_is_hard_and_failed_final_delta_is_soft():
    async def breaks(path, body, reader, writer):
        writer.write(CHUNKED_HEAD + chunk(line(ids=[7])))
        await writer.drain()
        writer.transport.abort()   # like kill -9 mid-stream

    async def fails(path, body, reader, writer):
        writer.write(CHUNKED_HEAD + chunk(line(finished=True, finish_reason=FinishReason.ERROR,
                                                error="oom")) + LAST_CHUNK)

    with pytest.raises(WorkerFailed) as info:
        asyncio.run(collect(breaks))
    assert info.value.hard
    with pytest.raises(WorkerFailed) as info:
        asyncio.run(collect(fails))
    assert not info.value.hard and "oom" in str(info.value)


def test_dead_worker_is_hard():
    async def main():
        client = HTTPClient()
        return [d async for d in stream_generate(client, f"http://127.0.0.1:{free_port()}", REQ)]
    with pytest.raises(WorkerFailed) as info:
        asyncio.run(main())
    assert info.value.hard


def test_release_kv_to_a_dead_worker_is_logged_not_raised(caplog):
    async def main():
        client = HTTPClient()
        await release_kv(client, f"http://127.0.0.1:{free_port()}", "req-1")
        await client.aclose()

    with caplog.at_level(logging.INFO, logger="tandem.gateway.worker_client"):
        asyncio.run(main())
    assert "could not release KV of req-1" in caplog.text


def test_release_kv_posts_the_request_id():
    async def worker(path, body, reader, writer):
        writer.write(json_answer(200, b'{"released":"req-2"}'))

    async def main():
        async with RawServer(worker) as srv:
            client = HTTPClient()
            await release_kv(client, srv.url, "req-2")
            await client.aclose()
            return srv.requests

    assert asyncio.run(main()) == [("/internal/kv_release", b'{"request_id":"req-2"}')]
