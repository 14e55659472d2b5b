from __future__ import annotations

import socket

import pytest
import torch

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferSizeMismatch
from tandem.transfer.blocks import byte_view, check_kv, paired_runs, runs
from tandem.transfer.shards import ShardedKV
from tandem.transfer.tcp import TcpSinkPlane, TcpSourcePlane
from tandem.transfer.wire import MAX_MESSAGE_BYTES, PeerClosed, recv_msg, send_msg

LAYOUT = KVLayout(model="m", dtype="bfloat16", block_size=2, num_layers=1, num_kv_heads=1, head_dim=4)


def test_runs_merge_consecutive_ids():
    assert runs([3, 4, 5, 9, 2, 3]) == [(3, 3), (9, 1), (2, 2)]
    assert runs([]) == []
    assert paired_runs([3, 4, 5, 9], [0, 1, 7, 8]) == [(3, 0, 2), (5, 7, 1), (9, 8, 1)]


def test_byte_view_shares_memory_for_bfloat16():
    kv = LAYOUT.allocate(3)
    view = byte_view(kv)
    assert len(view) == 3 * LAYOUT.block_nbytes
    view[LAYOUT.block_nbytes:2 * LAYOUT.block_nbytes] = bytes([0x80, 0x3F]) * (LAYOUT.block_nbytes // 2)
    assert torch.all(kv[1] == 1.0) and torch.all(kv[0] == 0) and torch.all(kv[2] == 0)


def test_check_kv_rejects_other_shapes():
    with pytest.raises(ValueError, match="does not match layout"):
        check_kv(torch.zeros(3, 1, 2, 2, 1, 5, dtype=torch.bfloat16), LAYOUT)


def test_framing_roundtrip_and_limits():
    a, b = socket.socketpair()
    with a, b:
        send_msg(a, {"op": "read", "ids": [1, 2]})
        assert recv_msg(b) == {"op": "read", "ids": [1, 2]}
        a.sendall((MAX_MESSAGE_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(ValueError, match="exceeds"):
            recv_msg(b)
        a.sendall(b"\x00\x00")
        a.close()
        with pytest.raises(PeerClosed):
            recv_msg(b)


def test_tcp_plane_streams_runs_into_other_blocks():
    src_kv, dst_kv = LAYOUT.allocate(6), LAYOUT.allocate(6)
    src_kv.copy_(torch.randn(src_kv.shape).to(torch.bfloat16))
    src, dst = TcpSourcePlane(ShardedKV.single(src_kv, LAYOUT)), TcpSinkPlane(ShardedKV.single(dst_kv, LAYOUT))
    a, b = socket.socketpair()
    with a, b:
        ids = [4, 5, 0]
        reply = src.describe(ids)
        src.stream(a, ids)
        dst.receive(b, reply, ids, [1, 2, 3])
    assert torch.equal(dst_kv[[1, 2, 3]], src_kv[ids]) and torch.all(dst_kv[[0, 4, 5]] == 0)


def test_tcp_plane_rejects_a_size_mismatch():
    dst = TcpSinkPlane(ShardedKV.single(LAYOUT.allocate(2), LAYOUT))
    with pytest.raises(TransferSizeMismatch, match="expected 64"):
        dst.receive(None, {"nbytes": 32}, [0, 1], [0, 1])
