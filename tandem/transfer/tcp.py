"""Built-in "tcp" data plane: block bytes follow the read reply on the control connection.

Source: sendall() of memoryview slices of the KV tensor's storage, one per run of consecutive blocks
(no per-block Python copy). Sink: recv_into() straight into the destination blocks' storage.
A KV tensor on a GPU is staged through host memory, one run at a time.
"""

from __future__ import annotations

import socket

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer.base import TransferSizeMismatch
from tandem.transfer.blocks import byte_view, runs
from tandem.transfer.wire import recv_into_exact


class TcpSourcePlane:
    kind = "tcp"

    def __init__(self, kv: torch.Tensor, layout: KVLayout) -> None:
        self._kv = kv                      # [num_blocks, *layout.block_shape]
        self._nb = layout.block_nbytes
        self._bytes = byte_view(kv) if kv.device.type == "cpu" else None

    def start(self) -> None:
        pass

    def describe(self, block_ids: list[int]) -> dict:
        return {"nbytes": len(block_ids) * self._nb}

    def stream(self, sock: socket.socket, block_ids: list[int]) -> None:
        for first, count in runs(block_ids):
            if self._bytes is not None:
                sock.sendall(self._bytes[first * self._nb:(first + count) * self._nb])
            else:
                host = self._kv[first:first + count].cpu()
                sock.sendall(byte_view(host))

    def close(self) -> None:
        pass


class TcpSinkPlane:
    kind = "tcp"

    def __init__(self, kv: torch.Tensor, layout: KVLayout) -> None:
        self._kv = kv                      # [num_blocks, *layout.block_shape]
        self._nb = layout.block_nbytes
        self._bytes = byte_view(kv) if kv.device.type == "cpu" else None

    def receive(self, sock: socket.socket, reply: dict, src_ids: list[int], dst_ids: list[int]) -> None:
        expected = len(dst_ids) * self._nb
        if reply.get("nbytes") != expected:
            raise TransferSizeMismatch(f"source sends {reply.get('nbytes')} bytes, expected {expected} "
                                       f"({len(dst_ids)} blocks of {self._nb} bytes)")
        for first, count in runs(dst_ids):
            if self._bytes is not None:
                recv_into_exact(sock, self._bytes[first * self._nb:(first + count) * self._nb])
            else:
                host = torch.empty_like(self._kv[first:first + count], device="cpu")
                recv_into_exact(sock, byte_view(host))
                self._kv[first:first + count].copy_(host)

    def close(self) -> None:
        pass
