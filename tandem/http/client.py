"""A small HTTP/1.1 keep-alive client: the gateway's calls to workers, the benchmark's requests.

Why not httpx: per request, httpx + httpcore + h11 + anyio cost ~1-2 ms of CPU (request
building, pool bookkeeping, pure-Python parsing, cancel scopes), and ~100 us per SSE chunk. At
the gateway that was most of the latency it adds; in the benchmark it competes with the server
under test. This client does only what both need: one request with a JSON body (and a few
extra headers), a response read as it arrives (Content-Length, chunked, or until the server
closes), idle connections kept per origin (scheme, host, port); http, and https with the
system's CA certificates.

Timing contract (the benchmark's TTFT and ITL): `Response.next_chunk()` returns each piece of
body data as soon as it is read (one HTTP chunk when chunked, so one SSE event as a server
streams them), so a clock read right after it is that data's arrival time.

Invariants:
- a connection goes back to the idle list only after its response body was read to the end;
  a response left mid-body closes its connection, which is how a worker learns that nobody
  listens any more (it aborts the request);
- `Response.expect_end()` says the caller has all it wants and the server is about to end the
  body (a worker's final delta): the rest is then read in the background and the connection
  kept, instead of closed;
- a request sent on a reused connection that the server had meanwhile closed (no byte of a
  response came back) is sent once more on a new connection;
- `abort(base_url)` closes every connection to that server at once, idle or in use (the caller
  has declared it lost, e.g. its host stopped answering): a read waiting on one fails now with
  ConnectionBroken instead of at its read timeout, and is not sent again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit


class HTTPFailure(Exception):
    """The exchange with the server failed below HTTP (no usable response)."""


class ConnectFailed(HTTPFailure):
    """No connection could be opened: the server looks down."""


class ResponseTimeout(HTTPFailure):
    """The server sent nothing for the read timeout."""


class ConnectionBroken(HTTPFailure):
    """The connection closed or the framing broke before the response ended."""


@dataclass(frozen=True)
class ClientConfig:
    connect_timeout_s: float = 2.0
    max_idle_per_origin: int = 256   # idle keep-alive connections kept per origin
    drain_timeout_s: float = 5.0     # expect_end(): how long the rest of the body may take
    stream_limit: int = 2 ** 22      # longest header block or body line accepted (bytes)
    # sent with every request (before a call's own): the gateway's cluster secret to its workers
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(eq=False)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    live: set[_Conn]              # every open connection to its server (HTTPClient.abort)
    reused: bool = False
    aborted: bool = False

    def close(self) -> None:
        self.live.discard(self)
        self.writer.close()

    def abort(self) -> None:
        self.aborted = True
        self.live.discard(self)
        self.writer.transport.abort()   # a pending read sees the end of the stream now


@dataclass
class _Origin:
    host: str
    port: int
    tls: ssl.SSLContext | None    # https
    prefix: str                   # path of the base URL, prepended to every request path
    host_header: str
    idle: list[_Conn]             # shared by every base URL on this scheme://host:port
    live: set[_Conn]              # open connections (idle or in use), shared likewise


class Response:
    """Status and headers of one response; its body is read with `next_chunk`, `lines` or `read`;
    `release()` (the `async with` exit) keeps or closes the connection."""

    def __init__(self, client: HTTPClient, origin: _Origin, conn: _Conn, status: int,
                 headers: dict[str, str], read_timeout_s: float) -> None:
        self._client, self._origin, self._conn = client, origin, conn
        self.status = status
        self.headers = headers
        self._timeout = read_timeout_s
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        length = headers.get("content-length")
        no_body = status in (204, 304)
        self._left = 0 if no_body else (None if self._chunked or length is None else int(length))
        self._until_close = not self._chunked and self._left is None
        self.complete = self._left == 0 and not self._chunked
        self._expect_end = False

    async def next_chunk(self) -> bytes | None:
        """The next piece of body data as it arrives (one HTTP chunk when chunked), None at
        the end. A plain coroutine, not a generator: it runs once per ndjson line or SSE event."""
        if self.complete:
            return None
        reader = self._conn.reader
        try:
            async with asyncio.timeout(self._timeout):
                if self._chunked:   # one chunk, read inline (no call per chunk)
                    size_line = await reader.readuntil(b"\r\n")
                    try:
                        size = int(size_line.split(b";", 1)[0], 16)
                    except ValueError as exc:
                        raise ConnectionBroken(f"bad chunk size line {size_line[:40]!r}") from exc
                    if size:
                        data = (await reader.readexactly(size + 2))[:-2]
                    else:
                        while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers
                            pass
                        data = b""
                elif self._left is not None:
                    data = await reader.read(min(self._left, 65536))
                    if not data:
                        raise ConnectionBroken("connection closed before the end of the body")
                    self._left -= len(data)
                else:
                    data = await reader.read(65536)
        except TimeoutError as exc:   # before OSError, its base class
            raise ResponseTimeout(f"no data for {self._timeout} s") from exc
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
            if self._conn.aborted:
                raise ConnectionBroken("connection aborted mid-body (the server was declared lost)") from exc
            raise ConnectionBroken(f"connection broke mid-body: {exc!r}") from exc
        if not data and self._conn.aborted:   # not the end of a body read until close
            raise ConnectionBroken("connection aborted mid-body (the server was declared lost)")
        if not data or self._left == 0:
            self.complete = True
        return data or None

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split at b"\\n" (without it); the last line may lack one."""
        rest = b""
        while (data := await self.next_chunk()) is not None:
            if not rest and data[-1:] == b"\n" and data.count(b"\n") == 1:
                yield data[:-1]   # the usual case: one ndjson line per HTTP chunk
                continue
            *whole, rest = (rest + data).split(b"\n")
            for line in whole:
                yield line
        if rest:
            yield rest

    async def read(self) -> bytes:
        parts = []
        while (data := await self.next_chunk()) is not None:
            parts.append(data)
        return b"".join(parts)

    def expect_end(self) -> None:
        """The caller stops reading; keep the connection once the body's end has arrived."""
        self._expect_end = True

    def release(self) -> None:
        """Keep the connection for another request if the body was read to its end (or, after
        expect_end(), once it has been), else close it. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        reusable = not self._until_close and self.headers.get("connection", "").lower() != "close"
        if self.complete and reusable:
            self._client._put_idle(self._origin, conn)
        elif self._expect_end and reusable:
            self._client._drain_later(self, conn)
        else:
            conn.close()


class _Exchange:
    """`async with client.stream(...) as response`: on exit the connection is kept or closed."""

    def __init__(self, client: HTTPClient, method: str, base_url: str, path: str, body: bytes,
                 read_timeout_s: float, headers: Mapping[str, str] | None) -> None:
        self._args = (client, method, base_url, path, body, read_timeout_s, headers)
        self._response: Response | None = None

    async def __aenter__(self) -> Response:
        client, method, base_url, path, body, timeout, headers = self._args
        self._response = await client.request(method, base_url, path, body, timeout, headers)
        return self._response

    async def __aexit__(self, exc_type, exc, tb) -> None:
        # After expect_end() even an exception (the caller closed or was cancelled) leaves the
        # connection drainable: the drain reads to the body's end or closes it.
        if self._response is not None:
            self._response.release()


class HTTPClient:
    def __init__(self, config: ClientConfig = ClientConfig()) -> None:
        self.config = config
        self._origins: dict[str, _Origin] = {}                       # base URL -> origin
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}     # (scheme, host, port) -> idle
        self._live: dict[tuple[str, str, int], set[_Conn]] = {}      # ... -> open connections
        self._draining: set[asyncio.Task] = set()
        self._tls: ssl.SSLContext | None = None                      # made at the first https URL
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in config.headers)

    def stream(self, method: str, base_url: str, path: str, body: bytes = b"",
               read_timeout_s: float = 120.0,
               headers: Mapping[str, str] | None = None) -> _Exchange:
        """`method base_url+path` with a JSON `body` and extra `headers`; use as
        `async with ... as response`. The read timeout applies to every wait for data."""
        return _Exchange(self, method, base_url, path, body, read_timeout_s, headers)

    async def request(self, method: str, base_url: str, path: str, body: bytes = b"",
                      read_timeout_s: float = 120.0,
                      headers: Mapping[str, str] | None = None) -> Response:
        """Send the request and read the response's head; the caller reads the body and must
        call `response.release()` (`stream()` does it)."""
        origin = self._origin(base_url)
        extra = self._headers + ("".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else "")
        request = (f"{method} {origin.prefix}{path} HTTP/1.1\r\nHost: {origin.host_header}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
                   ).encode("latin-1") + body
        for _ in range(2):
            conn = self._take_idle(origin) or await self._connect(origin)
            try:
                conn.writer.write(request)
                async with asyncio.timeout(read_timeout_s):
                    head = await conn.reader.readuntil(b"\r\n\r\n")
                    while head[9:10] == b"1":        # 1xx interim answer: the real one follows
                        head = await conn.reader.readuntil(b"\r\n\r\n")
            except TimeoutError as exc:   # before OSError, its base class
                conn.close()
                raise ResponseTimeout(f"no response for {read_timeout_s} s") from exc
            except (asyncio.IncompleteReadError, OSError) as exc:
                conn.close()
                if conn.aborted:
                    raise ConnectionBroken(f"{origin.host}:{origin.port}: connection aborted "
                                           "(the server was declared lost)") from exc
                partial = getattr(exc, "partial", b"")
                if conn.reused and not partial:
                    continue   # closed by the server while idle: once more on a new connection
                raise ConnectionBroken(f"connection lost before the response: {exc!r}") from exc
            except asyncio.LimitOverrunError as exc:
                conn.close()
                raise ConnectionBroken("response header block too long") from exc
            except BaseException:
                conn.close()
                raise
            conn.reused = True
            return self._response(origin, conn, head, read_timeout_s)
        raise ConnectionBroken(f"{origin.host}:{origin.port} closed two connections in a row")

    def abort(self, base_url: str) -> int:
        """Close every connection to `base_url`'s server now, idle or in use; returns how many.
        Reads waiting on them raise ConnectionBroken; later requests connect anew."""
        origin = self._origin(base_url)
        origin.idle.clear()
        conns = list(origin.live)
        for conn in conns:
            conn.abort()
        return len(conns)

    async def aclose(self) -> None:
        for task in list(self._draining):
            task.cancel()
        await asyncio.gather(*self._draining, return_exceptions=True)
        for idle in self._idle.values():
            while idle:
                idle.pop().close()

    # --- internals ------------------------------------------------------------------------
    def _origin(self, base_url: str) -> _Origin:
        origin = self._origins.get(base_url)
        if origin is None:
            u = urlsplit(base_url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ConnectFailed(f"this client speaks http and https only, cannot reach {base_url!r}")
            tls = None
            if u.scheme == "https":
                tls = self._tls = self._tls or ssl.create_default_context()
            host, port = u.hostname, u.port or (443 if tls else 80)
            key = (u.scheme, host, port)
            origin = _Origin(host, port, tls, u.path.rstrip("/"), u.netloc,
                             self._idle.setdefault(key, []), self._live.setdefault(key, set()))
            self._origins[base_url] = origin
        return origin

    async def _connect(self, origin: _Origin) -> _Conn:
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    origin.host, origin.port, ssl=origin.tls, limit=self.config.stream_limit)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {origin.host}:{origin.port}: {exc!r}") from exc
        conn = _Conn(reader, writer, origin.live)
        origin.live.add(conn)
        return conn

    def _take_idle(self, origin: _Origin) -> _Conn | None:
        while origin.idle:
            conn = origin.idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()   # the server closed it while it was idle
        return None

    def _put_idle(self, origin: _Origin, conn: _Conn) -> None:
        if len(origin.idle) < self.config.max_idle_per_origin and not conn.writer.is_closing():
            origin.idle.append(conn)
        else:
            conn.close()

    def _drain_later(self, response: Response, conn: _Conn) -> None:
        response._conn = conn
        task = asyncio.get_running_loop().create_task(self._drain(response))
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def _drain(self, response: Response) -> None:
        response._timeout = self.config.drain_timeout_s
        response._expect_end = False
        try:
            while await response.next_chunk() is not None:
                pass
        except HTTPFailure:
            pass
        finally:
            response.release()   # complete: kept; otherwise closed

    def _response(self, origin: _Origin, conn: _Conn, head: bytes, read_timeout_s: float) -> Response:
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError) as exc:
            conn.close()
            raise ConnectionBroken(f"bad status line {lines[0][:80]!r}") from exc
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if lines[0].startswith("HTTP/1.0") and headers.get("connection", "").lower() != "keep-alive":
            headers["connection"] = "close"
        length = headers.get("content-length")
        if length is not None and not length.isdigit():
            conn.close()
            raise ConnectionBroken(f"bad content-length {length[:40]!r}")
        return Response(self, origin, conn, status, headers, read_timeout_s)


__all__ = ["ClientConfig", "ConnectFailed", "ConnectionBroken", "HTTPClient", "HTTPFailure",
           "Response", "ResponseTimeout"]
