"""tandem/launcher/balancer.py over raw TCP upstreams on 127.0.0.1: a request whose gateway goes
away before answering is sent again to the other one (the client sees one answer); an answer
that broke off closes the client's connection; a refused gateway is skipped."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from tandem.launcher.balancer import BalancerConfig, BalancerThread
from tandem.launcher.cluster import free_port

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Upstream:
    """A raw server on its own loop; `mode`: "ok" answers, "vanish" closes after reading the
    request (a gateway killed mid-request), "half" sends half an answer and closes."""

    def __init__(self, mode: str, healthy: bool = True) -> None:
        self.mode = mode
        self.healthy = healthy   # what its /health says (the balancer's readiness checks)
        self.requests = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self.handle, "127.0.0.1", 0), self.loop).result(5)
        self.addr = ("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET /health "):
                    w.write(OK if self.healthy else b"HTTP/1.1 503 No\r\nContent-Length: 0\r\n\r\n")
                    await w.drain()
                    break
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await r.readexactly(length)
                self.requests += 1
                if self.mode == "vanish":
                    break
                w.write(OK if self.mode == "ok" else OK[:20])
                await w.drain()
                if self.mode == "half":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        w.close()

    def close(self) -> None:
        async def stop() -> None:   # on the server's loop: asyncio's Server is not thread-safe
            self.server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def balancer():
    made: list = []

    def make(*upstreams, **kw):
        lb = BalancerThread(BalancerConfig("127.0.0.1", 0, tuple(upstreams), **kw))
        lb.start()
        made.append(lb)
        return lb, f"http://127.0.0.1:{lb.balancer.port}"

    yield make
    for lb in made:
        lb.stop()


def test_a_request_whose_gateway_vanishes_is_answered_by_the_other(balancer):
    a, b = Upstream("vanish"), Upstream("ok")
    try:
        lb, url = balancer(a.addr, b.addr)
        for _ in range(6):   # round robin: half of them reach the vanishing one first
            r = httpx.post(url + "/v1/completions", content=b'{"prompt": "x"}', timeout=10)
            assert (r.status_code, r.text) == (200, "ok")
        assert a.requests == 3 and b.requests == 6
        assert lb.balancer.stats.replays == 3
    finally:
        a.close()
        b.close()


def test_a_gateway_that_is_not_ready_gets_nothing_while_another_is(balancer):
    a, b = Upstream("ok", healthy=False), Upstream("ok")
    try:
        lb, url = balancer(a.addr, b.addr, health_interval_s=0.05)
        deadline = time.monotonic() + 10
        while lb.balancer.ready != {b.addr}:
            assert time.monotonic() < deadline, lb.balancer.ready
            time.sleep(0.05)
        for _ in range(4):
            assert httpx.get(url + "/x", timeout=10).text == "ok"
        assert a.requests == 0 and b.requests == 4
        a.healthy = True   # ready again: round robin over both
        while lb.balancer.ready != {a.addr, b.addr}:
            assert time.monotonic() < deadline, lb.balancer.ready
            time.sleep(0.05)
        for _ in range(4):
            assert httpx.get(url + "/x", timeout=10).text == "ok"
        assert a.requests == 2 and b.requests == 6
    finally:
        a.close()
        b.close()


def test_a_refused_gateway_is_skipped(balancer):
    b = Upstream("ok")
    try:
        lb, url = balancer(("127.0.0.1", free_port()), b.addr)
        with httpx.Client(timeout=10) as c:   # keep-alive: several requests on one connection
            for _ in range(4):
                assert c.get(url + "/x").text == "ok"
        assert b.requests == 4 and lb.balancer.stats.replays == 0
    finally:
        b.close()


def test_an_answer_that_broke_off_closes_the_client(balancer):
    a = Upstream("half")
    try:
        lb, url = balancer(a.addr)
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.get(url + "/x", timeout=10)
        assert a.requests == 1 and lb.balancer.stats.replays == 0 and lb.balancer.stats.cut == 1
    finally:
        a.close()


def test_a_request_too_large_to_keep_is_not_replayed(balancer):
    a, b = Upstream("vanish"), Upstream("ok")
    try:
        lb, url = balancer(a.addr, b.addr, max_replay_bytes=100)
        with pytest.raises(httpx.RemoteProtocolError):   # the first goes to `a`, which vanishes
            httpx.post(url + "/x", content=b"y" * 1000, timeout=10)
        assert lb.balancer.stats.replays == 0
    finally:
        a.close()
        b.close()


def test_no_gateway_accepting_closes_the_client_after_the_bound(balancer):
    lb, url = balancer(("127.0.0.1", free_port()), unavailable_s=0.3)
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(url + "/x", timeout=10)


def test_an_interim_100_continue_is_not_an_answer(balancer):
    """A client that waits for 100 Continue before its body: the gateway vanishing after the
    body still gets the whole request (headers and body) sent again."""
    import socket

    class Continue(Upstream):
        async def handle(self, r, w):
            head = await r.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET /health "):
                w.write(OK)
                await w.drain()
                w.close()
                return
            w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await w.drain()
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await r.readexactly(length)
            self.requests += 1
            w.close()   # vanishes before its answer

    a, b = Continue("vanish"), Upstream("ok")
    try:
        lb, url = balancer(a.addr, b.addr)
        with socket.create_connection(("127.0.0.1", lb.balancer.port), timeout=10) as s:
            s.sendall(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
            s.sendall(b"body")
            got = b""
            while not got.endswith(b"ok"):
                chunk = s.recv(100)
                assert chunk, got
                got += chunk
        assert got.startswith(b"HTTP/1.1 200 OK") and a.requests == 1 and b.requests == 1
        assert lb.balancer.stats.replays == 1
    finally:
        a.close()
        b.close()
