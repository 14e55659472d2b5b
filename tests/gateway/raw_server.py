"""A scripted HTTP/1.1 server on a real socket, for the gateway's own HTTP client.

Each request goes to `handler(path, body, reader, writer)`, which writes the raw response bytes itself
(so tests can send broken framing, delay the last chunk or drop the connection). The server
counts connections and records which ones the client closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Handler = Callable[[str, bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def json_answer(status: int, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


class RawServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.closed_by_client = 0
        self.requests: list[tuple[str, bytes]] = []
        self.heads: list[str] = []                  # each request's line and headers, as sent
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1
                    return
                self.heads.append(head.decode("latin-1"))
                lines = self.heads[-1].split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(int(v) for k, _, v in (x.partition(":") for x in lines[1:])
                              if k.lower() == "content-length")
                body = await reader.readexactly(length)
                self.requests.append((path, body))
                await self.handler(path, body, reader, writer)
                if writer.is_closing():
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client += 1
        finally:
            writer.close()
