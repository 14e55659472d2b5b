"""The fault relay (tandem/testing/relay.py) on 127.0.0.1: latency in each direction, loss as
retransmission stalls with order kept, resets."""

import asyncio
import time

import pytest

from tandem.testing.relay import Relay, RelayConfig


async def echo_server():
    async def echo(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
    return await asyncio.start_server(echo, "127.0.0.1", 0)


async def with_relay(check, **cfg):
    server = await echo_server()
    up = server.sockets[0].getsockname()[:2]
    relay = Relay(RelayConfig(listen=("127.0.0.1", 0), upstream=up, **cfg))
    await relay.start()
    port = relay._server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        result = await asyncio.wait_for(check(reader, writer), 10)
        writer.close()
        return result, relay.stats
    finally:
        await relay.close()
        server.close()


def test_delay_applies_to_each_direction():
    async def round_trip(reader, writer):
        t0 = time.monotonic()
        writer.write(b"x")
        await reader.readexactly(1)
        return time.monotonic() - t0
    rtt, _ = asyncio.run(with_relay(round_trip, delay_s=0.05))
    assert 0.1 <= rtt < 0.3


def test_loss_stalls_segments_in_order():
    payload = bytes(range(256)) * 400     # 100 KiB: ~70 segments

    async def transfer(reader, writer):
        writer.write(payload)
        await writer.drain()
        return await reader.readexactly(len(payload))
    got, stats = asyncio.run(with_relay(transfer, loss=0.05, rto_s=0.05, seed=3))
    assert got == payload and stats.stalls > 0


def test_reset_first_connections():
    async def transfer(reader, writer):
        writer.write(b"y" * 10000)
        await writer.drain()
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await reader.readexactly(10000)
        return True
    ok, stats = asyncio.run(with_relay(transfer, reset_first=1, reset_after=1000))
    assert ok and stats.resets == 1
