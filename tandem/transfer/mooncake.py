""""mooncake" data plane: Mooncake Transfer Engine (P2P handshake, tcp or rdma) moves the block bytes.

Both sides register their KV tensor's memory with their own engine. The source's read reply carries its
segment name and the address of its block 0; the sink reads every selected block with one batch call
(one entry per run of blocks consecutive on both sides). The control channel stays ours (control.py).

The native module is imported lazily; every non-zero return code becomes a TransferError naming the call.
"""

from __future__ import annotations

import os
import socket
import threading

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer.base import TransferConfig, TransferError, TransferSizeMismatch
from tandem.transfer.blocks import paired_runs

INSTALL_HINT = ("the mooncake transport needs the wheel `mooncake-transfer-engine-non-cuda` (CPU) or "
                "`mooncake-transfer-engine` (CUDA) and the system library libibverbs "
                "(`apt-get install -y libibverbs1`)")


class MooncakeEngine:
    """One TransferEngine per transport, shared by its source and sink; initialized on first use and
    shut down when the last plane using it calls release()."""

    def __init__(self, config: TransferConfig) -> None:
        self._config = config
        self._users = 0
        self._te = None
        self._registered: dict[int, int] = {}    # ptr -> nbytes registered by us
        self._lock = threading.Lock()

    def engine(self):
        with self._lock:
            if self._te is None:
                self._te = self._initialize()
            return self._te

    @property
    def segment(self) -> str:
        """Name other engines use to reach this one (P2P handshake: 'host:rpc_port')."""
        return f"{self._config.mooncake_bind_address}:{self.engine().get_rpc_port()}"

    def register(self, ptr: int, nbytes: int) -> None:
        te = self.engine()
        with self._lock:
            if ptr in self._registered:
                return
            _check(te.register_memory(ptr, nbytes), f"register_memory(0x{ptr:x}, {nbytes})")
            self._registered[ptr] = nbytes

    def batch_read(self, segment: str, local: list[int], remote: list[int], sizes: list[int]) -> None:
        rc = self.engine().batch_transfer_sync_read(segment, local, remote, sizes)
        _check(rc, f"batch_transfer_sync_read of {len(sizes)} ranges ({sum(sizes)} bytes) from segment "
                   f"{segment}")

    def acquire(self) -> "MooncakeEngine":
        with self._lock:
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            te, regs, self._te, self._registered = self._te, self._registered, None, {}
        for ptr in regs:
            if te is not None:
                te.unregister_memory(ptr)

    def _initialize(self):
        # The native library reads its settings from the environment: set them here, from the config only.
        os.environ["MC_TCP_BIND_ADDRESS"] = self._config.mooncake_bind_address
        try:
            from mooncake.engine import TransferEngine
        except ImportError as exc:
            raise TransferError(f"{INSTALL_HINT}: {exc}") from exc
        te = TransferEngine()
        cfg = self._config
        _check(te.initialize(cfg.mooncake_bind_address, "P2PHANDSHAKE", cfg.mooncake_protocol,
                             cfg.mooncake_device),
               f"TransferEngine.initialize({cfg.mooncake_bind_address!r}, 'P2PHANDSHAKE', "
               f"{cfg.mooncake_protocol!r}, {cfg.mooncake_device!r})")
        return te


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise TransferError(f"Mooncake {what} failed with code {rc}")


def _cpu_only(kv: torch.Tensor) -> None:
    if kv.device.type != "cpu":
        raise TransferError("this build registers host memory only; GPU KV needs the CUDA Mooncake wheel "
                            "and registration with the device location")


class MooncakeSourcePlane:
    kind = "mooncake"

    def __init__(self, kv: torch.Tensor, layout: KVLayout, engine: MooncakeEngine) -> None:
        _cpu_only(kv)
        self._kv, self._nb, self._engine = kv, layout.block_nbytes, engine.acquire()
        self._closed = False

    def start(self) -> None:
        self._engine.register(self._kv.data_ptr(), self._kv.numel() * self._kv.element_size())

    def describe(self, block_ids: list[int]) -> dict:
        return {"segment": self._engine.segment, "base": self._kv.data_ptr(), "block_nbytes": self._nb}

    def stream(self, sock: socket.socket, block_ids: list[int]) -> None:
        pass    # the sink reads through Mooncake while this read keeps the blocks pinned

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.release()


class MooncakeSinkPlane:
    kind = "mooncake"

    def __init__(self, kv: torch.Tensor, layout: KVLayout, engine: MooncakeEngine) -> None:
        _cpu_only(kv)
        self._kv, self._nb, self._engine = kv, layout.block_nbytes, engine.acquire()
        self._closed = False

    def receive(self, sock: socket.socket, reply: dict, src_ids: list[int], dst_ids: list[int]) -> None:
        if int(reply["block_nbytes"]) != self._nb:
            raise TransferSizeMismatch(f"source blocks are {reply['block_nbytes']} bytes, here {self._nb}")
        if not src_ids:
            return
        base, nb = self._kv.data_ptr(), self._nb
        self._engine.register(base, self._kv.numel() * self._kv.element_size())
        remote_base = int(reply["base"])
        pairs = paired_runs(src_ids, dst_ids)
        self._engine.batch_read(str(reply["segment"]), [base + d * nb for _, d, _ in pairs],
                                [remote_base + s * nb for s, _, _ in pairs], [c * nb for _, _, c in pairs])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.release()
