"""A read cut while the source is still streaming (a reset, or a sink that stops reading) ends
that read on the source: its pins are released by the pin timeout, not held forever (in-process
tcp source, a raw socket as the sink)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig, make_transport
from tandem.transfer.control import split_address
from tandem.transfer.wire import recv_msg, send_msg

# 256 KiB a block, 64 blocks: 16 MiB, more than loopback's socket buffers hold
LAYOUT = KVLayout(model="big", dtype="float32", block_size=16, num_layers=4, num_kv_heads=4, head_dim=64)
N = 64


@pytest.fixture
def source():
    kv = LAYOUT.allocate(N, "cpu")
    t = make_transport("tcp", kv, LAYOUT, TransferConfig(port=0, io_timeout_s=0.5, pin_timeout_s=0.3))
    t.source.start()
    t.source.offer("r1", list(range(N)))
    yield t.source
    t.close()


def open_read(address: str) -> socket.socket:
    sock = socket.create_connection(split_address(address), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    send_msg(sock, {"op": "read", "request_id": "r1", "indices": None, "layout": LAYOUT.to_dict(),
                    "kind": "tcp"})
    assert recv_msg(sock)["ok"] is True
    assert sock.recv(1024)    # the stream has begun
    return sock


def released_within(source, within_s: float) -> list[str]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        released = source.poll_released()
        if released:
            return released
        time.sleep(0.05)
    return []


def test_a_reset_mid_stream_ends_the_read(source):
    sock = open_read(source.address)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()    # RST while the source is still sending
    assert released_within(source, 10.0) == ["r1"]
    assert source.num_active_reads() == 0 and source.num_pinned() == 0
    assert source.release_counts()["timeout"] == 1


def test_a_sink_that_stops_reading_mid_stream_ends_the_read(source):
    sock = open_read(source.address)
    try:
        assert source.num_active_reads() == 1
        # the source's send stalls for io_timeout_s, then it gives the read up
        assert released_within(source, 10.0) == ["r1"]
        assert source.num_active_reads() == 0 and source.num_pinned() == 0
    finally:
        sock.close()
