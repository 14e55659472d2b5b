"""A minimal HTTP/1.1 client for streaming POSTs, on asyncio streams.

Why not httpx here: its pure-Python h11 parsing and pool bookkeeping cost ~100+ us of CPU per
SSE chunk, which on a 2-core machine competes with the server under test. This client parses
only what a benchmark needs (status line, headers, chunked or Content-Length bodies) and
keeps idle keep-alive connections in a free list.

Timing contract: `Response.next_chunk()` returns each HTTP body chunk as soon as it is read, so
the caller's clock reading right after it is the arrival time of that data.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit


class HTTPError(Exception):
    """The connection failed or the server broke the HTTP framing."""


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = False

    def close(self) -> None:
        self.writer.close()


class Response:
    def __init__(self, pool: "ConnectionPool", conn: _Conn, status: int, headers: dict[str, str],
                 read_timeout_s: float) -> None:
        self._pool, self._conn = pool, conn
        self.status, self.headers = status, headers
        self._timeout = read_timeout_s
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        length = headers.get("content-length")
        self._left = None if self._chunked or length is None else int(length)
        self._done = False

    async def next_chunk(self) -> bytes | None:
        """The next piece of body data as it arrives, None at the end of the body.

        Raises TimeoutError when no byte comes for read_timeout_s, HTTPError on bad framing."""
        if self._done:
            return None
        reader = self._conn.reader
        async with asyncio.timeout(self._timeout):
            if self._chunked:
                size_line = await reader.readuntil(b"\r\n")
                try:
                    size = int(size_line.split(b";", 1)[0], 16)
                except ValueError as exc:
                    raise HTTPError(f"bad chunk size line {size_line[:40]!r}") from exc
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers
                        pass
                    self._done = True
                    return None
                return (await reader.readexactly(size + 2))[:-2]
            if self._left is not None:
                if self._left == 0:
                    self._done = True
                    return None
                data = await reader.read(min(self._left, 65536))
                if not data:
                    raise HTTPError("connection closed before the end of the body")
                self._left -= len(data)
                return data
            data = await reader.read(65536)   # body ends when the server closes the connection
            if not data:
                self._done = True
                self.headers["connection"] = "close"
                return None
            return data

    async def read(self) -> bytes:
        parts = []
        while (data := await self.next_chunk()) is not None:
            parts.append(data)
        return b"".join(parts)

    def release(self) -> None:
        """Give the connection back for reuse if the body was read to its end, else close it."""
        if self._conn is None:
            return
        if self._done and self.headers.get("connection", "").lower() != "close":
            self._pool._idle.append(self._conn)
        else:
            self._conn.close()
        self._conn = None


class ConnectionPool:
    """Keep-alive connections to one origin (scheme://host:port)."""

    def __init__(self, base_url: str, connect_timeout_s: float = 30.0, read_timeout_s: float = 600.0) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {base_url!r}")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self._ssl = ssl.create_default_context() if u.scheme == "https" else None
        self._host_header = u.netloc
        self._connect_timeout = connect_timeout_s
        self._read_timeout = read_timeout_s
        self._idle: list[_Conn] = []

    async def _connect(self) -> _Conn:
        async with asyncio.timeout(self._connect_timeout):
            reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self._ssl,
                                                           limit=2**22)
        return _Conn(reader, writer)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        """Send a POST and read the status line and headers; the caller must `release()`."""
        head = [f"POST {self.prefix}{path} HTTP/1.1", f"Host: {self._host_header}",
                f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        for attempt in range(2):
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                conn.writer.write(request)
                async with asyncio.timeout(self._read_timeout):
                    raw = await conn.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                conn.close()
                if conn.reused and attempt == 0:
                    continue   # the server closed an idle keep-alive connection: retry on a new one
                raise HTTPError(f"connection lost before the response: {exc!r}") from exc
            except BaseException:
                conn.close()
                raise
            conn.reused = True
            lines = raw.decode("latin-1").split("\r\n")
            try:
                status = int(lines[0].split(" ", 2)[1])
            except (IndexError, ValueError) as exc:
                conn.close()
                raise HTTPError(f"bad status line {lines[0]!r}") from exc
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            return Response(self, conn, status, headers, self._read_timeout)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()
