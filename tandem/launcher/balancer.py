"""A TCP balancer for `tandem up --gateways N`: one address in front of N gateways, so that a
gateway that dies (kill -9, a crash) costs its clients nothing while `tandem up` restarts it.

Each client connection is relayed to one gateway, chosen round robin among those that accept a
connection (a refused connect moves on to the next at once), ready ones first: every
`health_interval_s` the balancer asks each gateway's /health (readiness: it can serve a request
now, docs/dev/contracts.md), so a gateway that just started and knows no worker yet (its
workers register at their next heartbeat) gets no request while another is ready; when none
is, any that accepts is used. The relay copies bytes both ways
and keeps, per connection, the bytes the client sent since the gateway last answered: the
request in flight (HTTP/1.1 without pipelining: a client sends its next request only after the
previous answer). When the gateway's side of the connection ends:
- before the gateway sent a byte of its answer: the request is sent again, whole, to another
  gateway, and the client sees one answer (the dead gateway's worker calls ended with it, so the
  request ran to completion only once, on the second gateway), at most `max_replays` times. A
  request larger than `max_replay_bytes` is not kept: its connection is closed instead. An
  interim `100 Continue` is not an answer (the body follows it);
- after the answer began (a stream cut in the middle, or a gateway closing an idle keep-alive
  connection): the client's connection is closed too, as if it had been talking to the gateway
  directly. A client retries what it still needs, as with any server.
No gateway accepting for `unavailable_s` (all of them down) closes the client's connection.

Runs on its own thread with its own event loop (`BalancerThread`), inside `tandem up`: it dies
with the supervisor and its children, and is no extra process to supervise.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

_CHUNK = 65536


@dataclass(frozen=True)
class BalancerConfig:
    host: str
    port: int                                  # 0: a free one (tests)
    upstreams: tuple[tuple[str, int], ...]     # the gateways' (host, port)
    connect_timeout_s: float = 1.0             # one connect to one gateway
    unavailable_s: float = 10.0                # no gateway accepting this long: give the client up
    max_replay_bytes: int = 33 * 1024 * 1024   # a request kept for a replay (the gateways' 32 MiB body + headers)
    max_replays: int = 3                       # one request sent again at most this many times
    health_interval_s: float = 0.5             # each gateway's /health asked this often


@dataclass
class BalancerStats:
    connections: int = 0
    replays: int = 0           # requests sent again to another gateway
    cut: int = 0               # client connections closed as their gateway closed after answering


class Balancer:
    def __init__(self, config: BalancerConfig) -> None:
        self.config = config
        self.stats = BalancerStats()
        self._turn = itertools.count()
        self._server: asyncio.Server | None = None
        self.ready: set[tuple[str, int]] = set()   # gateways whose last /health said 200
        self._health: asyncio.Task | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.config.host, self.config.port,
                                                  reuse_address=True)
        self._health = asyncio.ensure_future(self._check_health())

    async def _check_health(self) -> None:
        while True:
            ups = self.config.upstreams
            answers = await asyncio.gather(*(_ready(up, self.config.connect_timeout_s) for up in ups))
            self.ready = {up for up, ok in zip(ups, answers) if ok}
            await asyncio.sleep(self.config.health_interval_s)

    async def close(self) -> None:
        if self._health is not None:
            self._health.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _connect(self, avoid: tuple[str, int] | None = None):
        """(upstream, reader, writer) of a gateway that accepts, preferring one other than
        `avoid`; None when none did for `unavailable_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.unavailable_s
        ups = self.config.upstreams
        while True:
            start = next(self._turn) if avoid is None else 0   # a replay: any but `avoid`
            order = [ups[(start + i) % len(ups)] for i in range(len(ups))]
            order.sort(key=lambda up: up not in self.ready)     # stable: round robin among ready ones
            if avoid in order and len(order) > 1:
                order.remove(avoid)
                order.append(avoid)
            for up in order:
                try:
                    r, w = await asyncio.wait_for(asyncio.open_connection(*up),
                                                  self.config.connect_timeout_s)
                    return up, r, w
                except (OSError, TimeoutError):
                    continue
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(0.05)

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        try:
            await _Relay(self, creader, cwriter).run()
        except Exception:  # a bug in one relay must not stop the others
            log.exception("balancer relay failed")
        finally:
            cwriter.close()


class _Relay:
    """One client connection. Invariant: `pending` holds exactly the bytes the client sent since
    the gateway last sent a byte (`answered` False), unless `replayable` is False."""

    def __init__(self, lb: Balancer, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.lb = lb
        self.creader, self.cwriter = creader, cwriter
        self.up: tuple[str, int] | None = None
        self.ureader: asyncio.StreamReader | None = None
        self.uwriter: asyncio.StreamWriter | None = None
        self.pending = bytearray()
        self.answered = True        # no request yet: the next client byte starts one
        self.replayable = True
        self.replays = 0            # of the request in flight

    async def _open(self, avoid: tuple[str, int] | None = None) -> bool:
        got = await self.lb._connect(avoid)
        if got is None:
            return False
        self.up, self.ureader, self.uwriter = got
        return True

    def _drop_upstream(self) -> None:
        if self.uwriter is not None:
            self.uwriter.close()
        self.ureader = self.uwriter = None

    async def _send_up(self, data: bytes) -> None:
        assert self.uwriter is not None
        try:
            self.uwriter.write(data)
            await self.uwriter.drain()
        except OSError:
            pass   # the read side sees the gateway go, and replays

    async def run(self) -> None:
        client = asyncio.ensure_future(_read(self.creader))
        upstream: asyncio.Future | None = None
        try:
            while True:
                waits = {client} if upstream is None else {client, upstream}
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if client in done:
                    data = client.result()
                    if not data:
                        return   # the client left
                    if self.answered:            # a new request begins
                        self.pending.clear()
                        self.answered, self.replayable, self.replays = False, True, 0
                    if self.replayable:
                        self.pending += data
                        if len(self.pending) > self.lb.config.max_replay_bytes:
                            self.replayable = False
                            self.pending.clear()
                    if self.uwriter is None:
                        if not await self._open():
                            return
                        upstream = asyncio.ensure_future(_read(self.ureader))
                    await self._send_up(data)
                    client = asyncio.ensure_future(_read(self.creader))
                if upstream is not None and upstream in done:
                    data = upstream.result()
                    if data:
                        # an interim "100 Continue" is no answer: the request's body follows it
                        if not data.startswith(b"HTTP/1.1 100 "):
                            self.answered = True
                        self.cwriter.write(data)
                        await self.cwriter.drain()
                        upstream = asyncio.ensure_future(_read(self.ureader))
                        continue
                    lost = self.up
                    self._drop_upstream()
                    upstream = None
                    if self.answered:
                        # the answer had begun (or the connection was idle): close as the gateway did
                        self.lb.stats.cut += 1
                        return
                    self.replays += 1
                    if (not self.replayable or self.replays > self.lb.config.max_replays
                            or not await self._open(avoid=lost)):
                        return
                    self.lb.stats.replays += 1
                    log.warning("gateway %s:%d went away before answering; request sent again to %s:%d",
                                *lost, *self.up)
                    upstream = asyncio.ensure_future(_read(self.ureader))
                    await self._send_up(bytes(self.pending))
        finally:
            for task in (client, upstream):
                if task is not None:
                    task.cancel()
            self._drop_upstream()


async def _ready(up: tuple[str, int], timeout_s: float) -> bool:
    """GET /health answers 200 within `timeout_s`."""
    try:
        async with asyncio.timeout(timeout_s):
            r, w = await asyncio.open_connection(*up)
            try:
                w.write(b"GET /health HTTP/1.0\r\nHost: balancer\r\n\r\n")
                await w.drain()
                status = await r.readline()
            finally:
                w.close()
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, ValueError):
        return False


async def _read(reader: asyncio.StreamReader) -> bytes:
    """The next chunk; b"" at the end or when the connection broke."""
    try:
        return await reader.read(_CHUNK)
    except OSError:
        return b""


class BalancerThread:
    """A Balancer on its own thread and event loop: `start()` returns once it listens."""

    def __init__(self, config: BalancerConfig) -> None:
        self.balancer = Balancer(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tandem-balancer", daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.balancer.start(), self._loop).result(10)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.balancer.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
