"""The shared keep-alive HTTP/1.1 client (tandem.http.client) against a real socket server."""

import asyncio

import pytest

from tandem.launcher.cluster import free_port
from tandem.http.client import (
    ClientConfig,
    ConnectFailed,
    ConnectionBroken,
    HTTPClient,
    ResponseTimeout,
)
from tests.gateway.raw_server import (
    CHUNKED_HEAD,
    LAST_CHUNK,
    RawServer,
    chunk,
    json_answer,
)


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


def test_extra_headers_chunk_extensions_and_a_body_until_close():
    async def answer(path, body, reader, writer):
        if path == "/ext":
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5\r\nhello\r\n3;ext=1\r\n, w\r\n4\r\norld\r\n0\r\n\r\n")
        else:   # no framing: the body ends when the server closes
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil eof")
            await writer.drain()
            writer.close()

    async def main():
        async with RawServer(answer) as srv:
            client = HTTPClient()
            got = []
            for path in ("/ext", "/eof", "/ext"):
                async with client.stream("POST", srv.url, path, b"{}",
                                         headers={"Authorization": "Bearer k"}) as r:
                    got.append(await r.read())
            await client.aclose()
            return got, srv.connections, srv.heads[0]
    got, connections, head = run(main())
    assert got == [b"hello, world", b"until eof", b"hello, world"]
    assert connections == 2   # the body read until close could not leave its connection
    assert head.startswith("POST /ext HTTP/1.1\r\n")
    assert "\r\nAuthorization: Bearer k\r\n" in head + "\r\n"
    assert head.lower().count("content-type: application/json") == 1


def test_each_chunk_is_returned_as_soon_as_it_arrives():
    """The benchmark's timing contract: a clock read after next_chunk() is the data's arrival."""
    async def paced(path, body, reader, writer):
        writer.write(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.write(chunk(b"data: 2\n\n") + LAST_CHUNK)

    async def main():
        async with RawServer(paced) as srv:
            client = HTTPClient()
            times, pieces = [], []
            loop = asyncio.get_running_loop()
            async with client.stream("POST", srv.url, "/sse") as r:
                start = loop.time()
                while (data := await r.next_chunk()) is not None:
                    times.append(loop.time() - start)
                    pieces.append(data)
            await client.aclose()
            return times, pieces
    times, pieces = run(main())
    assert pieces == [b"data: 1\n\n", b"data: 2\n\n"]
    assert times[0] < 0.1 and times[1] - times[0] >= 0.25


def test_request_and_release_keep_the_connection_and_time_out_mid_body():
    """request()/release(), as benchmarks/disagg/gateway_overhead.py uses them: the read
    timeout applies to every chunk, not only to the response's head."""
    async def answer(path, body, reader, writer):
        writer.write(CHUNKED_HEAD)
        if path.endswith("/slow"):
            await writer.drain()
            await asyncio.sleep(1)
        else:
            writer.write(chunk(b"hello") + chunk(b", world") + LAST_CHUNK)

    async def main():
        async with RawServer(answer) as srv:
            client = HTTPClient()
            pieces = []
            for _ in range(2):
                r = await client.request("POST", srv.url + "/base", "/x", b'{"a": 1}', 0.2)
                while (c := await r.next_chunk()) is not None:
                    pieces.append(c)
                r.release()
            r = await client.request("POST", srv.url, "/slow", b"", 0.2)
            with pytest.raises(ResponseTimeout):
                await r.next_chunk()
            r.release()
            await client.aclose()
            return pieces, srv.requests, srv.connections
    pieces, requests, connections = run(main())
    assert pieces == [b"hello", b", world"] * 2
    assert requests[:2] == [("/base/x", b'{"a": 1}')] * 2 and connections == 1


def test_configured_headers_go_with_every_request():
    """The gateway's cluster secret reaches each worker call, beside a call's own headers."""
    async def main():
        async with RawServer(ndjson) as srv:
            client = HTTPClient(ClientConfig(headers=(("x-tandem-cluster-secret", "cs"),)))
            for extra in (None, {"x-other": "1"}):
                async with client.stream("GET", srv.url, "/internal/stats", headers=extra) as r:
                    await r.read()
            await client.aclose()
            return srv.heads
    heads = run(main())
    assert all("\r\nx-tandem-cluster-secret: cs\r\n" in h + "\r\n" for h in heads) and len(heads) == 2
    assert "\r\nx-other: 1\r\n" in heads[1] + "\r\n"
    assert "cs" not in repr(ClientConfig(headers=(("x-tandem-cluster-secret", "cs"),)))


def test_abort_fails_waiting_calls_at_once_and_they_are_not_resent():
    """A server declared lost (its host vanished): abort() ends the reads waiting on it, the
    one waiting for a head on a reused connection and the one mid-body, with ConnectionBroken,
    long before their read timeout; a later request connects anew."""
    async def answer(path, body, reader, writer):
        if path == "/quick":
            writer.write(json_answer(200, b"{}"))
        elif path == "/stall-body":
            writer.write(CHUNKED_HEAD + chunk(b"part\n"))
            await writer.drain()
            await reader.read()     # silent until the client goes
        else:
            await reader.read()

    async def main():
        async with RawServer(answer) as srv:
            client = HTTPClient()
            async with client.stream("POST", srv.url, "/quick") as r:
                await r.read()          # one idle keep-alive connection

            async def call(path):
                async with client.stream("POST", srv.url, path, read_timeout_s=20) as r:
                    async for _ in r.lines():
                        pass

            head = asyncio.ensure_future(call("/stall-head"))     # on the reused connection
            body = asyncio.ensure_future(call("/stall-body"))
            await asyncio.sleep(0.3)
            t0 = asyncio.get_running_loop().time()
            assert client.abort(srv.url) == 2
            for task in (head, body):
                with pytest.raises(ConnectionBroken, match="aborted"):
                    await task
            waited = asyncio.get_running_loop().time() - t0
            async with client.stream("POST", srv.url, "/quick") as r:
                assert r.status == 200
            await client.aclose()
            return waited, srv.connections
    waited, connections = run(main())
    assert waited < 1.0
    assert connections == 3   # the first, the body call's, and the one after the abort
