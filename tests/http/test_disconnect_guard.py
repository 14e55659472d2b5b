"""DisconnectGuard: a client leaving before the response's end cancels the request; nothing else does."""

import asyncio

import pytest
from starlette.responses import Response, StreamingResponse

from tandem.http.disconnect_guard import DisconnectGuard


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
