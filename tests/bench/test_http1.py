"""The benchmark's HTTP/1.1 client: body framings, keep-alive reuse, stale connections, timeouts."""

from __future__ import annotations

import asyncio

import pytest

from tandem.bench.http1 import ConnectionPool


class Script:
    """A raw asyncio server answering by path; counts accepted connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.bodies: list[bytes] = []

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split()[1]
                length = next(int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length"))
                self.bodies.append(await reader.readexactly(length))
                if path == "/chunked":
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"5\r\nhello\r\n3;ext=1\r\n, w\r\n4\r\norld\r\n0\r\n\r\n")
                elif path == "/length":
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\nmissing")
                elif path == "/close":
                    writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil eof")
                    await writer.drain()
                    writer.close()
                    return
                elif path == "/drop":   # answers, then drops the keep-alive connection
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await writer.drain()
                    writer.close()
                    return
                elif path == "/slow":
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    await writer.drain()
                    await asyncio.sleep(1)
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass


async def with_server(fn):
    script = Script()
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(f"http://127.0.0.1:{port}", read_timeout_s=0.3)
    try:
        return await fn(pool, script)
    finally:
        await pool.aclose()
        server.close()


def test_chunked_and_content_length_bodies_and_keep_alive():
    async def go(pool, script):
        r = await pool.post("/chunked", b'{"a": 1}', {"Content-Type": "application/json"})
        pieces = []
        while (c := await r.next_chunk()) is not None:
            pieces.append(c)
        r.release()
        assert r.status == 200 and pieces == [b"hello", b", w", b"orld"]
        r = await pool.post("/length", b"x", {})
        assert r.status == 404 and await r.read() == b"missing"
        r.release()
        assert script.connections == 1 and script.bodies == [b'{"a": 1}', b"x"]   # reused
    asyncio.run(with_server(go))


def test_body_until_close_and_unread_body_closes_the_connection():
    async def go(pool, script):
        r = await pool.post("/close", b"", {})
        assert await r.read() == b"until eof"
        r.release()
        r = await pool.post("/chunked", b"", {})
        r.release()   # body not read: the connection cannot be reused
        r = await pool.post("/chunked", b"", {})
        assert await r.read() == b"hello, world"
        r.release()
        assert script.connections == 3
    asyncio.run(with_server(go))


def test_stale_keep_alive_connection_is_retried_once():
    async def go(pool, script):
        r = await pool.post("/drop", b"", {})
        assert await r.read() == b"ok"
        r.release()                      # pooled, but the server has closed it
        await asyncio.sleep(0.05)
        r = await pool.post("/chunked", b"", {})
        assert await r.read() == b"hello, world"
        r.release()
        assert script.connections == 2
    asyncio.run(with_server(go))


def test_read_timeout_and_refused_connection():
    async def go(pool, script):
        r = await pool.post("/slow", b"", {})
        with pytest.raises(TimeoutError):
            await r.next_chunk()
        r.release()
    asyncio.run(with_server(go))

    async def refused():
        from tests.bench.fake_server import free_port
        pool = ConnectionPool(f"http://127.0.0.1:{free_port()}")
        with pytest.raises(OSError):
            await pool.post("/x", b"", {})
    asyncio.run(refused())
    with pytest.raises(ValueError):
        ConnectionPool("ftp://x")
