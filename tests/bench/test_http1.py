"""ConnectionPool (tandem.bench.http1): keep-alive POSTs to one base URL over tandem.http.client."""

from __future__ import annotations

import asyncio

import pytest

from tandem.bench.http1 import ConnectionPool
from tandem.http.client import ConnectFailed, ResponseTimeout
from tests.gateway.raw_server import CHUNKED_HEAD, LAST_CHUNK, RawServer, chunk


async def answer(path, body, reader, writer):
    if path.endswith("/slow"):
        writer.write(CHUNKED_HEAD)
        await writer.drain()
        await asyncio.sleep(1)
    else:
        writer.write(CHUNKED_HEAD + chunk(b"hello") + chunk(b", world") + LAST_CHUNK)


def test_post_reads_chunks_and_reuses_the_connection():
    async def main():
        async with RawServer(answer) as srv:
            pool = ConnectionPool(srv.url + "/base", read_timeout_s=0.2)
            pieces = []
            for _ in range(2):
                r = await pool.post("/x", b'{"a": 1}', {"Content-Type": "application/json",
                                                        "x-k": "v"})
                while (c := await r.next_chunk()) is not None:
                    pieces.append(c)
                r.release()
            r = await pool.post("/slow", b"", {})
            with pytest.raises(ResponseTimeout):
                await r.next_chunk()
            r.release()
            await pool.aclose()
            return pieces, srv.requests, srv.connections, srv.heads[0]
    pieces, requests, connections, head = asyncio.run(main())
    assert pieces == [b"hello", b", world"] * 2
    assert requests[:2] == [("/base/x", b'{"a": 1}')] * 2 and connections == 1   # kept
    assert head.lower().count("content-type:") == 1 and "\r\nx-k: v" in head


def test_bad_scheme_and_refused_connection():
    with pytest.raises(ValueError):
        ConnectionPool("ftp://x")

    async def refused():
        from tests.bench.fake_server import free_port
        pool = ConnectionPool(f"http://127.0.0.1:{free_port()}")
        with pytest.raises(ConnectFailed):
            await pool.post("/x", b"", {})
    asyncio.run(refused())
