"""The control channel shared by every transport kind, and the source/sink built on it.

Protocol (one TCP connection per pull; messages framed by wire.py):
  sink -> {"op": "read", "request_id", "indices": [i, ...] | null, "layout": {...}, "kind"}
  src  -> {"ok": true, "layout", "block_ids": [selected source block ids], **plane.describe()}
          then, for kind "tcp", the selected blocks' raw bytes in order
       or {"ok": false, "code": unknown_request | layout_mismatch | unsupported_transport | bad_request
           | unauthorized, "message", "layout"}
  sink -> {"op": "confirm"}                      (after its copy completed)
  src  -> {"ok": true}                           (the request is now released to the engine)
  sink -> {"op": "release", "request_id"}        (give up without pulling; any connection)
With a cluster secret (TransferConfig.cluster_secret, tandem/cluster_secret.py) the sink adds
"secret" to the first message of each connection (read or release); a source with a secret
answers any other first message {"ok": false, "code": "unauthorized"} and closes: without the
secret nobody reads a request's KV or releases its pins. (The secret travels in clear, as on the
HTTP routes: the network between workers is trusted not to be sniffed.)

Layouts in messages are the whole model's (tandem/transfer/shards.py): two workers whose ranks
split the blocks differently (tensor or pipeline parallel) agree on it, and each converts at its
own edge; a different model, dtype, block size or kind is a layout_mismatch.

The source counts a connection that has an open read as a reader of the request: its blocks are not
released while it is open; a closed or timed-out connection ends the read (the pin timeout applies).
"""

from __future__ import annotations

import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from tandem import cluster_secret
from tandem.compute_threads import compute_alone
from tandem.errors import KVLayoutMismatch
from tandem.kv.layout import KVLayout
from tandem.transfer.base import (KVSink, KVSource, TransferConfig, TransferConnectionError,
                                  TransferError, TransferSizeMismatch, UnknownTransfer)
from tandem.transfer.pins import PinTable
from tandem.transfer.shards import ShardedKV
from tandem.transfer.wire import recv_msg, send_msg
from tandem.types import KVHandle


class SourcePlane(Protocol):
    kind: str

    def start(self) -> None:
        """Acquire native resources (register memory); called by KVSource.start()."""

    def describe(self, block_ids: list[int]) -> dict:
        """Fields added to a successful read reply (addresses, shm name, byte counts)."""

    def stream(self, sock: socket.socket, block_ids: list[int]) -> None:
        """Bytes sent after the reply (tcp only)."""

    def close(self) -> None: ...


class SinkPlane(Protocol):
    kind: str

    def receive(self, sock: socket.socket, reply: dict, src_ids: list[int], dst_ids: list[int]) -> None:
        """Copy the source's `src_ids` into local `dst_ids` (same length) as the reply describes."""

    def close(self) -> None: ...


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad KV source address {address!r}, expected 'host:port'")
    return host.strip("[]"), int(port)


class ControlSource(KVSource):
    def __init__(self, kind: str, kv: ShardedKV, config: TransferConfig,
                 planes: dict[str, SourcePlane]) -> None:
        self.kind = kind
        self._layout = kv.layout       # the whole model's block: what reads are checked against
        self._config = config
        self._planes = planes          # kind -> plane; "tcp" is always served
        self._pins = PinTable(config.pin_timeout_s)
        self._listener: socket.socket | None = None
        self._threads: set[threading.Thread] = set()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    # ---- engine-facing API
    def start(self) -> None:
        if self._listener is not None:
            return
        for plane in self._planes.values():
            plane.start()
        self._listener = socket.create_server((self._config.host, self._config.port))
        self._listener.settimeout(0.2)    # the accept loop checks for close() this often
        self._spawn(self._accept_loop, "kv-source-accept")

    @property
    def address(self) -> str:
        if self._listener is None:
            raise RuntimeError("KVSource.address is known only after start()")
        host, port = self._listener.getsockname()[:2]
        host = self._config.advertise_host or host
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def offer(self, request_id: str, block_ids: list[int]) -> None:
        self._pins.offer(request_id, block_ids)

    def withdraw(self, request_id: str) -> None:
        self._pins.finish(request_id, "withdrawn")

    def poll_released(self) -> list[str]:
        return self._pins.drain()

    def num_pinned(self) -> int:
        return self._pins.num_pinned()

    def num_active_reads(self) -> int:
        return self._pins.num_readers()

    def release_counts(self) -> dict[str, int]:
        """How many requests were released by confirm, timeout, withdrawal (for metrics)."""
        return dict(self._pins.counts)

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in threads:
            t.join(timeout=5.0)
        for plane in self._planes.values():
            plane.close()

    # ---- server
    def _spawn(self, target, name: str, *args) -> None:
        t = threading.Thread(target=self._run_tracked, args=(target, *args), name=name, daemon=True)
        with self._lock:
            self._threads.add(t)
        t.start()

    def _run_tracked(self, target, *args) -> None:
        try:
            target(*args)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return     # listener closed
            conn.settimeout(self._config.io_timeout_s)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(conn)
            self._spawn(self._serve_conn, "kv-source-conn", conn)

    def _serve_conn(self, conn: socket.socket) -> None:
        reading: str | None = None     # request id this connection holds a read on
        secret = self._config.cluster_secret
        authenticated = secret is None
        try:
            while not self._closed.is_set():
                msg = recv_msg(conn)
                if not authenticated:      # the first message presents the secret, or nothing is served
                    given = msg.get("secret")
                    if not cluster_secret.matches(given if isinstance(given, str) else None, secret):
                        send_msg(conn, _error("unauthorized", f"source {self.address} serves only "
                                              "sinks presenting the cluster secret", self._layout))
                        return
                    authenticated = True
                op = msg.get("op")
                if op == "read" and reading is None:
                    reading = self._serve_read(conn, msg)
                elif op == "confirm" and reading is not None:
                    self._pins.finish(reading, "confirmed")
                    self._pins.end_read(reading)     # released now: readers reached 0
                    reading = None
                    send_msg(conn, {"ok": True})
                elif op == "release":
                    known = self._pins.finish(str(msg.get("request_id")), "withdrawn")
                    send_msg(conn, {"ok": True, "known": known})
                else:
                    send_msg(conn, _error("bad_request", f"unexpected op {op!r} here", self._layout))
        except (OSError, ValueError):
            pass    # peer closed, timed out or sent garbage: the read (if any) ends below
        finally:
            if reading is not None:
                self._pins.end_read(reading)
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _serve_read(self, conn: socket.socket, msg: dict) -> str | None:
        """Answer one read; return the request id if a read is now open on this connection."""
        rid, kind = str(msg.get("request_id")), msg.get("kind")
        plane = self._planes.get(kind) if isinstance(kind, str) else None
        if plane is None:
            send_msg(conn, _error("unsupported_transport", f"source {self.address} serves "
                                  f"{sorted(self._planes)}, not {kind!r}", self._layout))
            return None
        try:
            self._layout.check_compatible(KVLayout.from_dict(msg["layout"]))
        except (KeyError, TypeError) as exc:
            send_msg(conn, _error("bad_request", f"malformed layout in read: {exc}", self._layout))
            return None
        except KVLayoutMismatch as exc:
            send_msg(conn, _error("layout_mismatch", str(exc), self._layout))
            return None
        block_ids = self._pins.begin_read(rid)
        if block_ids is None:
            send_msg(conn, _error(
                "unknown_request", f"source {self.address} holds no KV blocks for request {rid!r}: never "
                f"offered, already pulled and confirmed, withdrawn, or released after the "
                f"{self._config.pin_timeout_s:g}s pin timeout", self._layout))
            return None
        indices = msg.get("indices")
        if indices is None:
            selected = list(block_ids)
        elif (isinstance(indices, list) and all(isinstance(i, int) and 0 <= i < len(block_ids) for i in indices)):
            selected = [block_ids[i] for i in indices]
        else:
            self._pins.end_read(rid)
            send_msg(conn, _error("bad_request", f"indices must be ints in [0, {len(block_ids)})", self._layout))
            return None
        try:
            send_msg(conn, {"ok": True, "layout": self._layout.to_dict(), "block_ids": selected,
                            **plane.describe(selected)})
            plane.stream(conn, selected)
        except BaseException:
            self._pins.end_read(rid)   # a reset or stall mid-stream ends the read here, not in the caller
            raise
        return rid


def _error(code: str, message: str, layout: KVLayout) -> dict:
    return {"ok": False, "code": code, "message": message, "layout": layout.to_dict()}


class ControlSink(KVSink):
    def __init__(self, kind: str, kv: ShardedKV, config: TransferConfig, plane: SinkPlane) -> None:
        self.kind = kind
        self._num_blocks = kv.num_blocks
        self._layout = kv.layout       # the whole model's block, whatever the ranks hold
        self._config = config
        self._plane = plane
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def pull(self, handle: KVHandle, dst_block_ids: list[int], src_indices: list[int] | None = None) -> None:
        dst = self._check_args(handle, dst_block_ids, src_indices)
        where = f"pull of request {handle.request_id!r} from {handle.worker}"
        self._check_layout(handle.layout, where)       # before any connection or byte
        with self._connect(handle.worker, where) as sock:
            try:
                send_msg(sock, {"op": "read", "request_id": handle.request_id, "kind": self.kind,
                                "indices": None if src_indices is None else [int(i) for i in src_indices],
                                "layout": self._layout.to_dict(), **self._credential()})
                reply = recv_msg(sock)
                self._raise_for(reply, where)
                self._check_layout(reply["layout"], where)
                src = [int(b) for b in reply["block_ids"]]
                if len(src) != len(dst):
                    raise TransferSizeMismatch(f"{where}: source selected {len(src)} blocks, "
                                               f"{len(dst)} destination blocks given")
                self._plane.receive(sock, reply, src, dst)
                send_msg(sock, {"op": "confirm"})
                self._raise_for(recv_msg(sock), where)
            except (OSError, ValueError) as exc:
                raise TransferConnectionError(f"{where} failed: {exc}") from exc

    def pull_async(self, handle: KVHandle, dst_block_ids: list[int],
                   src_indices: list[int] | None = None) -> "Future[None]":
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._config.max_concurrent_pulls, thread_name_prefix="kv-pull",
                                                initializer=compute_alone)
            pool = self._pool
        return pool.submit(self.pull, handle, list(dst_block_ids),
                           None if src_indices is None else list(src_indices))

    def release(self, handle: KVHandle) -> bool:
        try:
            with self._connect(handle.worker, f"release of request {handle.request_id!r}") as sock:
                send_msg(sock, {"op": "release", "request_id": handle.request_id, **self._credential()})
                return bool(recv_msg(sock).get("known"))
        except (TransferError, OSError, ValueError):
            return False    # the pin timeout frees the blocks on the source

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._plane.close()

    # ---- helpers
    def _credential(self) -> dict:
        secret = self._config.cluster_secret
        return {} if secret is None else {"secret": secret}

    def _check_args(self, handle: KVHandle, dst_block_ids: list[int], src_indices: list[int] | None) -> list[int]:
        dst = [int(b) for b in dst_block_ids]
        n_src = len(handle.block_ids) if src_indices is None else len(src_indices)
        if len(dst) != n_src:
            raise ValueError(f"{len(dst)} destination blocks for {n_src} source blocks")
        if len(set(dst)) != len(dst) or any(not 0 <= b < self._num_blocks for b in dst):
            raise ValueError(f"destination block ids must be distinct and in [0, {self._num_blocks})")
        if src_indices is not None and (len(set(src_indices)) != len(src_indices)
                                        or any(not 0 <= i < len(handle.block_ids) for i in src_indices)):
            raise ValueError(f"src_indices must be distinct and in [0, {len(handle.block_ids)})")
        return dst

    def _check_layout(self, remote: dict, where: str) -> None:
        try:
            remote_layout = KVLayout.from_dict(remote)
        except (KeyError, TypeError) as exc:
            raise KVLayoutMismatch(f"{where}: malformed remote layout {remote!r}: {exc}") from exc
        try:
            self._layout.check_compatible(remote_layout)
        except KVLayoutMismatch as exc:
            raise KVLayoutMismatch(f"{where}: {exc}") from None

    def _raise_for(self, reply: dict, where: str) -> None:
        if reply.get("ok"):
            return
        code, message = reply.get("code"), reply.get("message", "")
        if code == "layout_mismatch":
            self._check_layout(reply.get("layout", {}), where)   # raises, from this side's point of view
        if code == "unknown_request":
            raise UnknownTransfer(f"{where}: {message}")
        raise TransferError(f"{where}: source answered {code}: {message}")

    def _connect(self, address: str, where: str) -> socket.socket:
        try:
            sock = socket.create_connection(split_address(address), timeout=self._config.connect_timeout_s)
        except (OSError, ValueError) as exc:
            raise TransferConnectionError(f"{where}: cannot connect to KV source {address}: {exc}") from exc
        sock.settimeout(self._config.io_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
