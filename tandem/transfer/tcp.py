"""Built-in "tcp" data plane: block bytes follow the read reply on the control connection.

The bytes on the wire are whole blocks of the model's layout (tandem/transfer/shards.py).
One tensor holding whole blocks (a worker without ranks): the source sends memoryview slices of
its storage, one per run of consecutive blocks, and the sink receives straight into its blocks'
storage (no per-block Python copy). A worker split over ranks: the source assembles a few blocks
at a time from the ranks' pieces into a staging buffer and sends it; the sink receives a few
blocks into a staging buffer and copies each rank's piece into that rank's cache.
A KV tensor on a GPU is staged through host memory, one run at a time.
"""

from __future__ import annotations

import socket

import torch

from tandem.transfer.base import TransferSizeMismatch
from tandem.transfer.blocks import byte_view, runs
from tandem.transfer.shards import ShardedKV, copy_blocks, staging
from tandem.transfer.wire import recv_into_exact

STAGING_BYTES = 4 * 2**20     # whole blocks assembled or received at a time by a split worker
# A socket timeout bounds a whole sendall (Python >= 3.5): sent in pieces, the transfer's
# io_timeout_s bounds a stall (no piece goes through), not a long transfer over a slow link.
SEND_PIECE_BYTES = 4 * 2**20


def _send(sock: socket.socket, data: memoryview) -> None:
    for i in range(0, len(data), SEND_PIECE_BYTES):
        sock.sendall(data[i:i + SEND_PIECE_BYTES])


def _chunks(ids: list[int], n: int) -> list[list[int]]:
    return [ids[i:i + n] for i in range(0, len(ids), n)]


class TcpSourcePlane:
    kind = "tcp"

    def __init__(self, kv: ShardedKV) -> None:
        self._kv = kv
        self._nb = kv.layout.block_nbytes
        t = kv.tensor
        self._bytes = byte_view(t) if t is not None and t.device.type == "cpu" else None

    def start(self) -> None:
        pass

    def describe(self, block_ids: list[int]) -> dict:
        return {"nbytes": len(block_ids) * self._nb}

    def stream(self, sock: socket.socket, block_ids: list[int]) -> None:
        t = self._kv.tensor
        if t is None:
            buf = staging(self._kv.layout, STAGING_BYTES)        # [n, *whole block shape]
            whole = ShardedKV.single(buf, self._kv.layout)
            view = byte_view(buf)
            for chunk in _chunks(block_ids, buf.shape[0]):
                copy_blocks(self._kv, chunk, whole, range(len(chunk)))
                _send(sock, view[:len(chunk) * self._nb])
            return
        for first, count in runs(block_ids):
            if self._bytes is not None:
                _send(sock, self._bytes[first * self._nb:(first + count) * self._nb])
            else:
                _send(sock, byte_view(t[first:first + count].cpu()))

    def close(self) -> None:
        pass


class TcpSinkPlane:
    kind = "tcp"

    def __init__(self, kv: ShardedKV) -> None:
        self._kv = kv
        self._nb = kv.layout.block_nbytes
        t = kv.tensor
        self._bytes = byte_view(t) if t is not None and t.device.type == "cpu" else None

    def receive(self, sock: socket.socket, reply: dict, src_ids: list[int], dst_ids: list[int]) -> None:
        expected = len(dst_ids) * self._nb
        if reply.get("nbytes") != expected:
            raise TransferSizeMismatch(f"source sends {reply.get('nbytes')} bytes, expected {expected} "
                                       f"({len(dst_ids)} blocks of {self._nb} bytes)")
        t = self._kv.tensor
        if t is None:
            buf = staging(self._kv.layout, STAGING_BYTES)        # [n, *whole block shape]
            whole = ShardedKV.single(buf, self._kv.layout)
            view = byte_view(buf)
            for chunk in _chunks(dst_ids, buf.shape[0]):
                recv_into_exact(sock, view[:len(chunk) * self._nb])
                copy_blocks(whole, range(len(chunk)), self._kv, chunk)
            return
        for first, count in runs(dst_ids):
            if self._bytes is not None:
                recv_into_exact(sock, self._bytes[first * self._nb:(first + count) * self._nb])
            else:
                host = torch.empty_like(t[first:first + count], device="cpu")
                recv_into_exact(sock, byte_view(host))
                t[first:first + count].copy_(host)

    def close(self) -> None:
        pass

