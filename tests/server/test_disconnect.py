"""A client that goes away cancels its backend stream, through a real uvicorn server."""

import asyncio
import socket
import time

import httpx
import orjson
import pytest
import uvicorn

from tandem.server.internal import wire
from tandem.server.app import build_app
from tandem.server.config import ServerConfig
from tandem.types import EngineRequest, SamplingParams
from tests.server.fakes import FakeBackend

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_for(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.02)
    return cond()


async def with_server(backend: FakeBackend, scenario) -> None:
    port = free_port()
    config = uvicorn.Config(build_app(backend, ServerConfig()), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        assert await wait_for(lambda: server.started, 10.0)
        await scenario(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10.0)


def run(backend, scenario):
    asyncio.run(with_server(backend, scenario))


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {**BODY, "stream": True}),
    ("/v1/completions", {"model": "fake-model", "prompt": "hi", "max_tokens": 500, "stream": True,
                         "n": 2}),
    ("/client/v4/accounts/a/ai/run/@cf/x/fake-model", {"prompt": "hi", "stream": True}),
    ("/internal/generate", wire.request_to_dict(EngineRequest("gw-1", [5, 6], SamplingParams(max_tokens=500)))),
])
def test_stream_disconnect_aborts_backend(path, body):
    backend = FakeBackend(reply="x" * 400, token_delay=0.02)

    async def scenario(url):
        async with httpx.AsyncClient() as client:
            async with client.stream("POST", url + path, content=orjson.dumps(body)) as r:
                assert r.status_code == 200
                got = 0
                async for _ in r.aiter_raw():
                    got += 1
                    if got >= 3:
                        break
            assert backend.running, "the stream should still be generating when we leave"
        # leaving the `async with` closes the connection
        assert await wait_for(lambda: not backend.running), backend.running
        assert len(backend.aborted) == len(backend.seen) >= 1

    run(backend, scenario)


def test_non_streaming_disconnect_aborts_backend():
    backend = FakeBackend(reply="x" * 400, token_delay=0.02)

    async def scenario(url):
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(url + "/v1/chat/completions", content=orjson.dumps(BODY),
                                  timeout=httpx.Timeout(5.0, read=0.3))
        assert backend.seen
        assert await wait_for(lambda: not backend.running), backend.running
        assert backend.aborted == [backend.seen[0].request_id]

    run(backend, scenario)


def test_finished_stream_is_not_counted_as_abort():
    backend = FakeBackend(reply="abc", token_delay=0.0)

    async def scenario(url):
        async with httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/chat/completions",
                                  content=orjson.dumps({**BODY, "stream": True}))
            assert r.text.endswith("data: [DONE]\n\n")
        assert backend.aborted == [] and not backend.running

    run(backend, scenario)


@pytest.mark.parametrize("stream", [False, True])
def test_a_generating_request_runs_one_disconnect_watcher(stream):
    """Besides the request's own task: the guard's watcher, and the loop over the deltas in a
    task of its own (in_own_task: the stream's body, a non-streaming request's _collect);
    nothing else watches for the disconnect."""
    backend = FakeBackend(reply="x" * 400, token_delay=0.02)
    app = build_app(backend, ServerConfig())
    body = orjson.dumps({**BODY, "stream": stream})
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "root_path": "", "query_string": b"", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80),
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}

    async def main():
        left = asyncio.Event()
        sent: list[dict] = []
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if messages:
                return messages.pop()
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        request = asyncio.ensure_future(app(scope, receive, send))
        assert await wait_for(lambda: backend.running)
        await asyncio.sleep(0.1)
        extra = asyncio.all_tasks() - {asyncio.current_task(), request}
        left.set()
        await asyncio.wait_for(request, 5)
        return extra, sent

    extra, sent = asyncio.run(main())
    names = sorted(t.get_coro().__qualname__ for t in extra)
    assert names == sorted(["_Watch._watch", "StreamingResponse.__call__" if stream else "_collect"])
    assert not backend.running and backend.aborted == [backend.seen[0].request_id]
    assert [m["type"] for m in sent][:1] == (["http.response.start"] if stream else [])
