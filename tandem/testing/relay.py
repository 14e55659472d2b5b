"""A TCP relay that adds latency, loss stalls or resets to the connections through it: the
tests' stand-in for a slow or broken link where netem is not available.

    python -m tandem.testing.relay --listen 10.213.5.9:7000 --to 10.213.5.3:7000 \
        [--delay-ms 20] [--loss 0.01 --rto-ms 200] [--reset-first N --reset-after BYTES]

Each accepted connection gets its own connection to `--to`; bytes are copied both ways.
- latency: every byte is delivered `--delay-ms` later than it arrived, in each direction (so a
  round trip grows by twice that); data stays pipelined (the delay is not paid per read).
- loss: a byte stream cannot lose bytes, so loss is what TCP makes of it: each segment
  (`--segment` bytes, 1448 as on Ethernet) is, with probability `--loss`, held for `--rto-ms`
  (Linux's minimum retransmission timeout, 200 ms) before delivery, and everything behind it
  waits too (order is kept: head-of-line blocking, as a receiver sees a retransmitted segment).
- reset: the first `--reset-first` connections are reset (RST) once `--reset-after` bytes came
  from the upstream, as a peer that crashed or a middlebox that dropped the flow.
The process prints "relay listening on HOST:PORT" when it accepts connections, and counts
connections, bytes, stalls and resets on stderr at exit (SIGTERM or SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RelayConfig:
    listen: tuple[str, int]
    upstream: tuple[str, int]
    delay_s: float = 0.0        # added to each direction
    loss: float = 0.0           # share of segments held for rto_s
    rto_s: float = 0.2
    segment: int = 1448
    reset_first: int = 0        # connections reset after reset_after upstream bytes
    reset_after: int = 0
    seed: int = 0


@dataclass
class RelayStats:
    connections: int = 0
    bytes_up: int = 0          # client -> upstream
    bytes_down: int = 0        # upstream -> client
    stalls: int = 0
    resets: int = 0


_END = object()


class Relay:
    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.stats = RelayStats()
        self._rng = random.Random(config.seed)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        host, port = self.config.listen
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            await self._relay(c_reader, c_writer)
        except asyncio.CancelledError:
            pass    # close(): end quietly (asyncio reports a cancelled connection task as an error)

    async def _relay(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self.stats.connections += 1
        reset_at = self.config.reset_after if self.stats.connections <= self.config.reset_first else None
        try:
            try:
                u_reader, u_writer = await asyncio.open_connection(*self.config.upstream)
            except OSError:
                _reset(c_writer)
                return
            for w in (c_writer, u_writer):
                w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            up = asyncio.ensure_future(self._pipe(c_reader, u_writer, "bytes_up", None))
            down = asyncio.ensure_future(self._pipe(u_reader, c_writer, "bytes_down", reset_at))
            try:
                await asyncio.gather(up, down)
            except _ResetNow:
                self.stats.resets += 1
                _reset(c_writer)
                _reset(u_writer)
            except (OSError, asyncio.IncompleteReadError):
                _reset(c_writer)
                _reset(u_writer)
            finally:
                up.cancel()
                down.cancel()
                await asyncio.gather(up, down, return_exceptions=True)
                for w in (c_writer, u_writer):
                    w.close()
        finally:
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counter: str,
                    reset_at: int | None) -> None:
        """Copy reader -> writer, each segment delivered at its due time, in order."""
        cfg = self.config
        queue: asyncio.Queue = asyncio.Queue(maxsize=4096)   # backpressure on a slow writer

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is _END:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        last_due = 0.0
        total = 0
        try:
            while True:
                data = await reader.read(65536)
                now = time.monotonic()
                if not data:
                    await queue.put((max(last_due, now + cfg.delay_s), _END))
                    break
                # segments matter only for loss; without it a read goes on as one piece
                step = cfg.segment if cfg.loss else len(data)
                for i in range(0, len(data), step):
                    seg = data[i:i + step]
                    due = now + cfg.delay_s
                    if cfg.loss and self._rng.random() < cfg.loss:
                        due += cfg.rto_s
                        self.stats.stalls += 1
                    last_due = max(last_due, due)
                    await queue.put((last_due, seg))
                    total += len(seg)
                    setattr(self.stats, counter, getattr(self.stats, counter) + len(seg))
                    if reset_at is not None and total >= reset_at:
                        raise _ResetNow()
            await sender
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)


class _ResetNow(Exception):
    pass


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), not FIN."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def config_from_argv(argv: list[str] | None = None) -> RelayConfig:
    p = argparse.ArgumentParser(prog="python -m tandem.testing.relay", description=__doc__.split("\n")[0])
    p.add_argument("--listen", type=_address, required=True)
    p.add_argument("--to", type=_address, required=True)
    p.add_argument("--delay-ms", type=float, default=0.0, help="added to each direction")
    p.add_argument("--loss", type=float, default=0.0, help="share of segments held --rto-ms")
    p.add_argument("--rto-ms", type=float, default=200.0)
    p.add_argument("--segment", type=int, default=1448)
    p.add_argument("--reset-first", type=int, default=0)
    p.add_argument("--reset-after", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    return RelayConfig(a.listen, a.to, a.delay_ms / 1000, a.loss, a.rto_ms / 1000, a.segment,
                       a.reset_first, a.reset_after, a.seed)


async def _main(config: RelayConfig) -> None:
    relay = Relay(config)
    await relay.start()
    print(f"relay listening on {config.listen[0]}:{config.listen[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await relay.close()
    print(f"relay stats: {relay.stats}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    asyncio.run(_main(config_from_argv()))
