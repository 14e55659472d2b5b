"""A client leaving before the response's end cancels the request, and nothing else does: the
DisconnectGuard on bare ASGI apps, then a real uvicorn server whose backend streams get aborted."""

import asyncio
import socket
import time

import httpx
import orjson
import pytest
import uvicorn
from starlette.responses import Response, StreamingResponse

from tandem.api.disconnect import DisconnectGuard
from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.internal import wire
from tandem.types import EngineRequest, SamplingParams
from tests.api.fakes import FakeBackend

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500}


class Client:
    """ASGI receive/send of one HTTP request whose client may leave at a chosen moment."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.left = asyncio.Event()
        self.body_sent = False

    async def receive(self) -> dict:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)


def scope() -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "method": "GET",
            "path": "/", "headers": [], "query_string": b""}


def streaming_app(log: list[str], tokens: int, gap_s: float):
    async def body():
        try:
            for i in range(tokens):
                await asyncio.sleep(gap_s)
                yield f"t{i}\n".encode()
        finally:
            log.append("closed")

    async def app(scope, receive, send):
        await receive()
        log.append(f"spec {scope['asgi']['spec_version']}")
        await StreamingResponse(body())(scope, receive, send)
        log.append("returned")
    return app


async def leave_midway(app, client: Client, ready) -> float:
    """Run `app` for `client`, who leaves once ready() holds; how long the app then took to
    return (it returns normally: the cancellation was the guard's)."""
    run = asyncio.ensure_future(app(scope(), client.receive, client.send))
    while not ready():
        await asyncio.sleep(0.005)
    client.left.set()
    left_at = asyncio.get_running_loop().time()
    await asyncio.wait_for(run, 5)
    return asyncio.get_running_loop().time() - left_at


def test_disconnect_mid_stream_cancels_and_closes_the_body():
    async def main():
        log: list[str] = []
        client = Client()
        guard = DisconnectGuard(streaming_app(log, tokens=1000, gap_s=0.01))
        took = await leave_midway(guard, client, lambda: len(client.sent) >= 3)  # start + 2 chunks
        return log, client.sent, took
    log, sent, took = asyncio.run(main())
    assert took < 1.0   # at once, not when the 10 s stream would have ended
    assert log == ["spec 2.4", "closed"]
    assert sum(m["type"] == "http.response.body" for m in sent) < 100


def test_stream_that_ends_is_untouched_and_the_watcher_stops():
    async def main():
        log: list[str] = []
        client = Client()
        await DisconnectGuard(streaming_app(log, tokens=3, gap_s=0))(scope(), client.receive, client.send)
        client.left.set()            # a disconnect after the end changes nothing
        await asyncio.sleep(0.01)
        return log, client.sent, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    log, sent, tasks = asyncio.run(main())
    assert log == ["spec 2.4", "closed", "returned"]
    assert [m.get("body") for m in sent[1:]] == [b"t0\n", b"t1\n", b"t2\n", b""]
    assert tasks == []


def test_plain_response_has_no_watcher_and_outside_cancels_propagate():
    async def plain(scope, receive, send):
        await Response(b"{}", media_type="application/json")(scope, receive, send)

    async def main():
        client = Client()
        await DisconnectGuard(plain)(scope(), client.receive, client.send)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        log: list[str] = []
        run = asyncio.ensure_future(DisconnectGuard(streaming_app(log, 1000, 0.01))(
            scope(), Client().receive, client.send))
        await asyncio.sleep(0.05)
        run.cancel()                 # e.g. server shutdown: not the guard's to swallow
        with pytest.raises(asyncio.CancelledError):
            await run
        assert "closed" in log
    asyncio.run(main())


def working_app(log: list[str], work_s: float):
    """A non-streaming route: reads its body, works, answers with a Content-Length."""
    async def app(scope, receive, send):
        await receive()
        await asyncio.sleep(0)   # let a watcher start
        log.append(f"tasks {len(asyncio.all_tasks())}")
        try:
            await asyncio.sleep(work_s)
        finally:
            log.append("closed")
        await Response(b"{}", media_type="application/json")(scope, receive, send)
        log.append("returned")
    return app


def test_disconnect_before_a_plain_response_cancels_the_work_with_one_task():
    async def main():
        log: list[str] = []
        client = Client()
        took = await leave_midway(DisconnectGuard(working_app(log, 10.0)), client, lambda: log)
        return log, client.sent, took
    log, sent, took = asyncio.run(main())
    assert took < 1.0
    assert log == ["tasks 3", "closed"]   # main, the request, one watcher
    assert sent == []


def test_plain_response_that_ends_is_untouched_and_the_watcher_stops():
    async def main():
        log: list[str] = []
        client = Client()
        await DisconnectGuard(working_app(log, 0.01))(scope(), client.receive, client.send)
        client.left.set()
        await asyncio.sleep(0.01)
        return log, client.sent, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    log, sent, tasks = asyncio.run(main())
    assert log == ["tasks 2", "closed", "returned"]   # the request (main here), one watcher
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"{}"
    assert tasks == []


def test_a_guard_inside_a_guard_passes_through():
    async def main():
        log: list[str] = []
        guard = DisconnectGuard(DisconnectGuard(working_app(log, 10.0)))
        return log, await leave_midway(guard, Client(), lambda: log)
    log, took = asyncio.run(main())
    assert took < 1.0 and log == ["tasks 3", "closed"]   # still one watcher, still cancelled


# --- through the app and a real server ------------------------------------------------------

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
