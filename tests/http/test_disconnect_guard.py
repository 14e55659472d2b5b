"""StreamGuard: a client leaving mid-stream cancels the request; nothing else does."""

import asyncio

import pytest
from starlette.responses import Response, StreamingResponse

from tandem.gateway.stream_guard import StreamGuard


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


def test_disconnect_mid_stream_cancels_and_closes_the_body():
    async def main():
        log: list[str] = []
        client = Client()
        guard = StreamGuard(streaming_app(log, tokens=1000, gap_s=0.01))
        run = asyncio.ensure_future(guard(scope(), client.receive, client.send))
        while len(client.sent) < 3:   # start + 2 chunks
            await asyncio.sleep(0.005)
        client.left.set()
        left_at = asyncio.get_running_loop().time()
        await asyncio.wait_for(run, 5)   # returns normally: the cancellation was the guard's
        return log, client.sent, asyncio.get_running_loop().time() - left_at
    log, sent, took = asyncio.run(main())
    assert took < 1.0   # at once, not when the 10 s stream would have ended
    assert log == ["spec 2.4", "closed"]
    assert sum(m["type"] == "http.response.body" for m in sent) < 100


def test_stream_that_ends_is_untouched_and_the_watcher_stops():
    async def main():
        log: list[str] = []
        client = Client()
        await StreamGuard(streaming_app(log, tokens=3, gap_s=0))(scope(), client.receive, client.send)
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
        await StreamGuard(plain)(scope(), client.receive, client.send)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        log: list[str] = []
        run = asyncio.ensure_future(StreamGuard(streaming_app(log, 1000, 0.01))(
            scope(), Client().receive, client.send))
        await asyncio.sleep(0.05)
        run.cancel()                 # e.g. server shutdown: not the guard's to swallow
        with pytest.raises(asyncio.CancelledError):
            await run
        assert "closed" in log
    asyncio.run(main())
