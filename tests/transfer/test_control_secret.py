"""The KV transfer server takes the cluster secret: without it nobody reads a request's KV or
releases its pins (in-process tcp source and sinks)."""

from __future__ import annotations

import socket

import pytest
import torch

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig, TransferError, make_transport
from tandem.transfer.control import split_address
from tandem.transfer.wire import recv_msg, send_msg
from tandem.types import KVHandle

LAYOUT = KVLayout(model="tiny", dtype="float32", block_size=4, num_layers=2, num_kv_heads=2, head_dim=8)
N = 8


def transport(secret: str | None):
    kv = LAYOUT.allocate(N, "cpu")
    return kv, make_transport("tcp", kv, LAYOUT, TransferConfig(port=0, cluster_secret=secret,
                                                                 io_timeout_s=10.0))


@pytest.fixture
def source():
    kv, t = transport("cs")
    kv.copy_(torch.randn(kv.shape))
    t.source.start()
    t.source.offer("r1", [2, 5])
    yield kv, t
    t.close()


def handle(t) -> KVHandle:
    return KVHandle(worker=t.source.address, request_id="r1", block_ids=[2, 5], num_tokens=8,
                    layout=LAYOUT.to_dict())


def test_a_sink_without_the_secret_reads_nothing_and_releases_nothing(source):
    kv, t = source
    for secret in (None, "wrong"):
        dst_kv, sink = transport(secret)
        try:
            with pytest.raises(TransferError, match="unauthorized"):
                sink.sink.pull(handle(t), [0, 1])
            assert not sink.sink.release(handle(t))
            assert torch.count_nonzero(dst_kv) == 0
        finally:
            sink.close()
    assert t.source.num_pinned() == 1 and t.source.poll_released() == []
    # a raw client: the first message without the secret is answered and the connection closed
    with socket.create_connection(split_address(t.source.address), timeout=5) as s:
        send_msg(s, {"op": "release", "request_id": "r1"})
        assert recv_msg(s)["code"] == "unauthorized"
        assert s.recv(1) == b""
    assert t.source.num_pinned() == 1


def test_the_secret_opens_the_pull(source):
    kv, t = source
    dst_kv, sink = transport("cs")
    try:
        sink.sink.pull(handle(t), [0, 1])
        assert torch.equal(dst_kv[[0, 1]], kv[[2, 5]])
        assert t.source.poll_released() == ["r1"]
    finally:
        sink.close()
