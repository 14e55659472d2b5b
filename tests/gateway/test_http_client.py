"""The gateway's keep-alive HTTP/1.1 client against a real socket server."""

import asyncio

import pytest

from tandem.gateway.http_client import (ClientConfig, ConnectFailed, ConnectionBroken, HTTPClient,
                                        ResponseTimeout)
from tandem.gateway.cluster import free_port

from tests.gateway.raw_server import CHUNKED_HEAD, LAST_CHUNK, RawServer, chunk, json_answer


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def ndjson(path, body, reader, writer):
    writer.write(CHUNKED_HEAD + chunk(b'{"a":1}\n') + chunk(b'{"b":') + chunk(b'2}\n{"c":3}\n')
                 + LAST_CHUNK)


def test_lines_across_chunks_and_keep_alive():
    async def main():
        async with RawServer(ndjson) as srv:
            client = HTTPClient()
            for _ in range(3):
                async with client.stream("POST", srv.url, "/x", b'{"q":1}') as r:
                    assert r.status == 200
                    assert [line async for line in r.lines()] == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
            await client.aclose()
            return srv.connections, srv.requests
    connections, requests = run(main())
    assert connections == 1
    assert requests == [("/x", b'{"q":1}')] * 3


def test_content_length_body_and_base_path():
    async def answer(path, body, reader, writer):
        writer.write(json_answer(413, b'{"error":{"message":"too long"}}'))

    async def main():
        async with RawServer(answer) as srv:
            client = HTTPClient()
            async with client.stream("POST", srv.url + "/base/", "/y", b"{}") as r:
                status, data = r.status, await r.read()
            async with client.stream("POST", srv.url, "/z") as r:
                await r.read()
            await client.aclose()
            return status, data, srv.requests, srv.connections
    status, data, requests, connections = run(main())
    assert (status, data) == (413, b'{"error":{"message":"too long"}}')
    assert requests == [("/base/y", b"{}"), ("/z", b"")]
    assert connections == 1


def test_abandoned_body_closes_the_connection():
    async def main():
        async def slow(path, body, reader, writer):
            writer.write(CHUNKED_HEAD + chunk(b"first\n"))
            await reader.read()   # the rest of the body never comes; b"" once the client closes

        async with RawServer(slow) as srv:
            client = HTTPClient()
            async with client.stream("POST", srv.url, "/gen") as r:
                async for line in r.lines():
                    assert line == b"first"
                    break
            for _ in range(100):   # the server sees the close (a worker aborts the request)
                if srv.closed_by_client:
                    break
                await asyncio.sleep(0.01)
            closed = srv.closed_by_client
            await client.aclose()
            return closed
    assert run(main()) == 1


def test_expect_end_keeps_the_connection_after_a_late_last_chunk():
    async def late_end(path, body, reader, writer):
        writer.write(CHUNKED_HEAD + chunk(b"final\n"))
        await asyncio.sleep(0.05)
        writer.write(LAST_CHUNK)

    async def main():
        async with RawServer(late_end) as srv:
            client = HTTPClient()
            for _ in range(2):
                async with client.stream("POST", srv.url, "/gen") as r:
                    async for line in r.lines():
                        assert line == b"final"
                        r.expect_end()
                        break
                await asyncio.sleep(0.2)   # the background drain has finished
            await client.aclose()
            return srv.connections, srv.closed_by_client
    assert run(main()) == (1, 0)


def test_idle_connection_closed_by_the_server_is_replaced():
    async def answer_then_close(path, body, reader, writer):
        writer.write(json_answer(200, b"{}"))
        await writer.drain()
        writer.close()   # no "connection: close": the client learns it only on reuse

    async def main():
        async with RawServer(answer_then_close) as srv:
            client = HTTPClient()
            bodies = []
            for _ in range(3):
                async with client.stream("POST", srv.url, "/s") as r:
                    bodies.append(await r.read())
                await asyncio.sleep(0.05)
            await client.aclose()
            return bodies, srv.connections
    bodies, connections = run(main())
    assert bodies == [b"{}"] * 3
    assert connections == 3


def test_refused_connection_is_connect_failed():
    async def main():
        client = HTTPClient(ClientConfig(connect_timeout_s=1.0))
        with pytest.raises(ConnectFailed):
            async with client.stream("POST", f"http://127.0.0.1:{free_port()}", "/gen"):
                pass
        with pytest.raises(ConnectFailed):
            async with client.stream("POST", "https://127.0.0.1:1", "/gen"):
                pass
    run(main())


def test_silence_is_a_timeout_and_a_dropped_body_is_broken():
    async def silent(path, body, reader, writer):
        if path == "/silent":
            await asyncio.sleep(1)
        else:
            writer.write(CHUNKED_HEAD + chunk(b"part\n"))
            await writer.drain()
            writer.transport.abort()

    async def main():
        async with RawServer(silent) as srv:
            client = HTTPClient()
            with pytest.raises(ResponseTimeout):
                async with client.stream("POST", srv.url, "/silent", read_timeout_s=0.1):
                    pass
            with pytest.raises(ConnectionBroken):
                async with client.stream("POST", srv.url, "/drop") as r:
                    async for _ in r.lines():
                        pass
            await client.aclose()
    run(main())
