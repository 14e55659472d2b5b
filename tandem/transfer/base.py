"""KV block transfer between a prefill worker (source) and a decode worker (sink).

Who frees what:
- The engine owns its block pool. The transfer code never allocates or frees blocks.
- Prefill side: the engine calls `KVSource.offer(request_id, block_ids)` when a prefill finishes and keeps
  those blocks pinned. The source tells the engine, through `poll_released()`, when a request's blocks may
  be freed: after the decode side confirmed its pull, after `pin_timeout_s` with no pull in progress, or
  after the decode side gave them up (`KVSink.release`). The engine then frees them; never before.
- Decode side: the engine allocates `dst_block_ids` itself and calls `KVSink.pull`. On success the blocks
  hold the remote KV and the source has been told to release. On an exception the engine frees its
  `dst_block_ids` (their content is undefined) and fails or retries the request.

Data planes ("kinds"): "tcp" (bytes over the control connection), "shm" (the source's KV tensor lives in a
file in /dev/shm that the sink maps), "mooncake" (Mooncake Transfer Engine reads). All kinds share one
small TCP control channel (tandem/transfer/control.py) for the layout check, block addresses and confirm.
"""

from __future__ import annotations

import abc
from concurrent.futures import Future
from dataclasses import dataclass

from tandem.config import TransferConfig  # noqa: F401 - part of this module's interface
from tandem.types import KVHandle

KINDS = ("tcp", "shm", "mooncake")


class TransferError(Exception):
    """A KV pull failed; the destination blocks hold undefined data and must be freed by the caller."""


class TransferConnectionError(TransferError):
    """The source's control server cannot be reached, or it dropped the connection mid-transfer."""


class UnknownTransfer(TransferError):
    """The source holds no blocks for this request id: never offered, already confirmed, or timed out."""


class TransferSizeMismatch(TransferError):
    """The source sent or describes a different number of bytes than the pull expects."""


class KVSource(abc.ABC):
    """Prefill side: serves pinned blocks to sinks and reports when they may be freed."""

    kind: str

    @abc.abstractmethod
    def start(self) -> None:
        """Start serving (binds the control port). Idempotent."""

    @property
    @abc.abstractmethod
    def address(self) -> str:
        """'host:port' of the control server; goes into KVHandle.worker. Valid after start()."""

    @abc.abstractmethod
    def offer(self, request_id: str, block_ids: list[int]) -> None:
        """Make `block_ids` (sequence order) pullable under `request_id`; the engine keeps them pinned
        until `poll_released` returns the id. Raises ValueError if the id is already offered."""

    @abc.abstractmethod
    def withdraw(self, request_id: str) -> None:
        """The engine no longer wants the blocks served (request aborted). They come back through
        `poll_released` as soon as no pull is reading them. Unknown ids are ignored."""

    @abc.abstractmethod
    def poll_released(self) -> list[str]:
        """Request ids whose blocks the engine may now free (confirmed, timed out, withdrawn or given
        up by the sink). Each id is returned exactly once. Also applies the pin timeout."""

    @abc.abstractmethod
    def num_pinned(self) -> int:
        """Requests whose blocks are still pinned (offered and not yet returned by poll_released)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop serving and drop open connections. Pinned blocks stay the engine's to free."""


class KVSink(abc.ABC):
    """Decode side: copies a source's blocks into this worker's KV tensor."""

    kind: str

    @abc.abstractmethod
    def pull(self, handle: KVHandle, dst_block_ids: list[int], src_indices: list[int] | None = None) -> None:
        """Copy blocks `handle.block_ids[i] for i in src_indices` (default: all, in order) into local
        `dst_block_ids` (same length), then confirm so the source releases ALL of the handle's blocks
        (indices not pulled are the ones this side already had). Blocking; thread-safe.

        Raises KVLayoutMismatch (naming the fields) before any byte is written, UnknownTransfer,
        TransferConnectionError, TransferSizeMismatch, TransferError, or ValueError for bad arguments.
        """

    @abc.abstractmethod
    def pull_async(self, handle: KVHandle, dst_block_ids: list[int],
                   src_indices: list[int] | None = None) -> "Future[None]":
        """`pull` on the sink's thread pool; the future's result() re-raises pull's exceptions."""

    @abc.abstractmethod
    def release(self, handle: KVHandle) -> None:
        """Give the handle's blocks up without pulling (decode side aborted). Best effort: the pin
        timeout frees them anyway if the source cannot be reached."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the thread pool and unmap/unregister what this sink mapped."""


@dataclass
class Transport:
    """What `make_transport` returns: a worker uses `source` (prefill role) or `sink` (decode role).

    Neither side opens sockets or native resources until used (`source.start()`, first `sink.pull`).
    """

    kind: str
    source: KVSource
    sink: KVSink

    def close(self) -> None:
        self.sink.close()
        self.source.close()
