"""The cluster tier: Mooncake Store (a `mooncake_master` plus the memory its clients lend).

Every worker of a cluster is a client of the same master: a block one worker puts, any other
gets. Values are framed (frame.py: header with the key, size and checksum), so a value that does
not check out is a miss. Calls are batched (`batch_is_exist`, `batch_put_from`, `batch_get_into`
over registered staging buffers of `batch_blocks` frames) and release the GIL.

Faults: the client connects on a background thread (Mooncake's own setup retries for ~90 s when
no master answers); until then, and for `retry_s` after any call fails with an RPC error, the
tier is unavailable: lookups find nothing, loads miss and writes are skipped, so the worker
serves from its local tiers. One warning per outage, `errors` counts the failed calls, and the
tier is used again once a call succeeds. A master restarted empty simply misses.
A master (or peer) host that vanished does not refuse: Mooncake's RPCs then wait 10-30 s, on
the engine's thread for a lookup. So every native call runs on the tier's own thread and its
caller waits at most `call_timeout_s` (plus 1 s per 25 MB the call moves): past that the call
counts as failed, and the tier stays unavailable until the stuck call has returned (it may still
write into the staging buffers) and a background probe has reached the master again (a TCP
connection, tried every `retry_s`): an outage costs the engine one timed-out call, not one per
retry.

Return codes (Mooncake's ErrorCode): >= 0 success (bytes read for a get); -704 object not found,
-703 replica not ready, -707 lease expired: a miss; -200 no space, -705 exists: a put skipped;
anything else is an error (RPC -900/-901 make the tier unavailable for `retry_s`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from urllib.parse import urlparse

import torch

from tandem.config import EngineConfig
from tandem.kvstore.frame import HEADER_BYTES, CorruptValue, check_frame, write_frame
from tandem.kvstore.tier import Tier, TierContext

log = logging.getLogger(__name__)

_MISS = (-703, -704, -707)
_PUT_SKIPPED = (-200, -705)
_LOCAL_BUFFER_BYTES = 16 * 2**20
_SLOWEST_BYTES_PER_S = 25e6          # a call moving blocks gets 1 s more per 25 MB


class _NoAnswer(Exception):
    """A store call was skipped (a stuck call is still out) or got no answer in time."""


def parse_store_url(url: str) -> tuple[str, int]:
    """'mooncake://HOST:PORT' -> (host, port) of the master's RPC address."""
    u = urlparse(url)
    if u.scheme != "mooncake" or not u.hostname or not u.port:
        raise ValueError(f"--kv-store {url!r}: expected mooncake://HOST:PORT (the master's RPC address)")
    return u.hostname, u.port


class MooncakeStoreTier(Tier):
    name = "store"

    def __init__(self, url: str, segment_bytes: int, block_nbytes: int, batch_blocks: int = 32,
                 local_address: str = "127.0.0.1", retry_s: float = 5.0, clock=time.monotonic,
                 protocol: str = "tcp", device: str = "", call_timeout_s: float = 2.0) -> None:
        super().__init__(block_nbytes)
        self.url = url
        self.master = parse_store_url(url)
        self._segment_bytes = segment_bytes
        self._local_address = local_address     # what this client advertises to the others
        self._protocol, self._device = protocol, device
        self._retry_s = retry_s
        self._clock = clock
        self._batch = batch_blocks
        frame = HEADER_BYTES + block_nbytes
        # staging frames, registered with the client: one buffer per direction (its own lock)
        self._rbuf = torch.empty((batch_blocks, frame), dtype=torch.uint8)
        self._wbuf = torch.empty((batch_blocks, frame), dtype=torch.uint8)
        self._rlock, self._wlock = threading.Lock(), threading.Lock()
        self._client = None
        self._down_until = 0.0          # unavailable before this time
        self._outage = False            # a warning went out for the current outage
        self._lock = threading.Lock()   # connect and state changes
        self._closed = False
        self._connector: threading.Thread | None = None
        self._call_timeout_s = call_timeout_s
        self._rpc = ThreadPoolExecutor(1, thread_name_prefix="kvstore-rpc")   # every native call
        self._stuck = 0                 # calls past their deadline that have not returned yet
        self._probing = False           # a background probe waits for the master to answer again
        self._connect_later(0.0)

    # --- connection ----------------------------------------------------------------------------
    def _connect_later(self, delay_s: float) -> None:
        if self._closed:
            return
        self._connector = threading.Thread(target=self._connect, args=(delay_s,), daemon=True,
                                           name="kvstore-connect")
        self._connector.start()

    def _connect(self, delay_s: float) -> None:
        time.sleep(delay_s)
        host, port = self.master
        try:   # Mooncake's setup waits ~90 s for a master that is not there: look first
            socket.create_connection((host, port), timeout=2.0).close()
        except OSError as exc:
            self._failed(f"cannot reach the master ({exc})")
            self._connect_later(self._retry_s)
            return
        os.environ["MC_TCP_BIND_ADDRESS"] = self._local_address   # read by the native library
        try:   # lazy: an optional native wheel, only workers given --kv-store load it
            from mooncake.store import MooncakeDistributedStore
        except ImportError as exc:
            log.error("--kv-store needs the wheel mooncake-transfer-engine-non-cuda (CPU) or "
                      "mooncake-transfer-engine (CUDA) and libibverbs1: %s; the store tier stays off", exc)
            return
        client = MooncakeDistributedStore()
        rc = client.setup(self._local_address, "P2PHANDSHAKE", self._segment_bytes, _LOCAL_BUFFER_BYTES,
                          self._protocol, self._device, f"{host}:{port}")
        if rc == 0:
            for buf in (self._rbuf, self._wbuf):
                rc = rc or client.register_buffer(buf.data_ptr(), buf.numel())
        if rc != 0:
            self._failed(f"setup returned {rc}")
            self._connect_later(self._retry_s)
            return
        with self._lock:
            if self._closed:
                client.close()
                return
            self._client = client
        self._succeeded()

    @property
    def available(self) -> bool:
        return self._client is not None and self._clock() >= self._down_until and not self._stuck

    def _call(self, what: str, fn: Callable, *args, nbytes: int = 0):
        """fn(*args) on the tier's thread, waited for at most call_timeout_s (+ nbytes' share)."""
        with self._lock:
            if self._stuck:
                raise _NoAnswer(what)
        fut: Future = self._rpc.submit(fn, *args)
        timeout = self._call_timeout_s + nbytes / _SLOWEST_BYTES_PER_S
        try:
            return fut.result(timeout=timeout)
        except (FutureTimeout, CancelledError):
            if not fut.cancel():      # running: it may still use the buffers; no call until it returns
                with self._lock:
                    self._stuck += 1
                fut.add_done_callback(self._returned)
            self._failed(f"{what} got no answer in {timeout:.1f} s")
            self._probe_until_reachable()
            raise _NoAnswer(what) from None

    def _probe_until_reachable(self) -> None:
        """Unavailable until the master accepts a TCP connection again (checked off the engine's
        thread every retry_s), so that no request's lookup pays another timeout meanwhile."""
        with self._lock:
            self._down_until = float("inf")
            if self._probing or self._closed:
                return
            self._probing = True

        def probe() -> None:
            while not self._closed:
                time.sleep(self._retry_s)
                try:
                    socket.create_connection(self.master, timeout=2.0).close()
                except OSError:
                    continue
                with self._lock:
                    self._down_until = self._clock()
                    break
            with self._lock:
                self._probing = False

        threading.Thread(target=probe, daemon=True, name="kvstore-probe").start()

    def _returned(self, fut: Future) -> None:
        with self._lock:
            self._stuck -= 1

    def _failed(self, what: str) -> None:
        self.count(errors=1)
        with self._lock:
            self._down_until = self._clock() + self._retry_s
            first = not self._outage
            self._outage = True
        if first:
            log.warning("Mooncake Store %s is unavailable (%s); serving from the local KV tiers and "
                        "retrying every %.0f s", self.url, what, self._retry_s)

    def _succeeded(self) -> None:
        with self._lock:
            was_out, self._outage = self._outage, False
        if was_out:
            log.warning("Mooncake Store %s is reachable again", self.url)

    def _check(self, codes: Sequence[int], call: str) -> bool:
        """False (and the tier unavailable for a while) if a code says the call itself failed."""
        bad = [c for c in codes if c < 0 and c not in _MISS and c not in _PUT_SKIPPED]
        if bad:
            self._failed(f"{call} returned {bad[0]}")
            return False
        self._succeeded()
        return True

    # --- the tier -------------------------------------------------------------------------------
    @property
    def capacity_bytes(self) -> int:
        return self._segment_bytes   # this worker's share of the store

    @property
    def used_bytes(self) -> int:
        return 0   # held by the master's pool, not tracked here

    def contains(self, key: str) -> bool:
        return self.contains_many([key])[0]

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        client = self._client
        if not keys or client is None or not self.available:
            return [False] * len(keys)
        try:
            codes = list(self._call("batch_is_exist", client.batch_is_exist, list(keys)))
        except _NoAnswer:
            return [False] * len(keys)
        if not self._check(codes, "batch_is_exist"):
            return [False] * len(keys)
        return [c == 1 for c in codes]

    def read(self, keys: Sequence[str], dst: Sequence[torch.Tensor]) -> int:
        client = self._client
        if client is None or not self.available:
            return 0
        start = time.perf_counter()
        frame = HEADER_BYTES + self.block_nbytes
        n = 0
        with self._rlock:
            for at in range(0, len(keys), self._batch):
                chunk = list(keys[at:at + self._batch])
                ptrs = [self._rbuf[i].data_ptr() for i in range(len(chunk))]
                try:
                    codes = list(self._call("batch_get_into", client.batch_get_into, chunk, ptrs,
                                            [frame] * len(chunk), nbytes=frame * len(chunk)))
                except _NoAnswer:
                    break
                self._check(codes, "batch_get_into")
                ok = 0
                for i, (key, code) in enumerate(zip(chunk, codes)):
                    if code != frame:
                        break
                    try:
                        dst[at + i].copy_(check_frame(self._rbuf[i], key, self.block_nbytes))
                    except CorruptValue as exc:
                        log.warning("Mooncake Store value %s is unusable (%s); treated as a miss", key, exc)
                        self.count(corrupt=1)
                        break
                    ok += 1
                n += ok
                if ok < len(chunk):
                    break
        self.count(reads=1, read_bytes=n * self.block_nbytes, read_seconds=time.perf_counter() - start)
        return n

    def write(self, keys: Sequence[str], src: torch.Tensor) -> int:
        """Put the blocks the store lacks; returns how many were put."""
        client = self._client
        if client is None or not self.available:
            self.count(skipped=len(keys))
            return 0
        present = self.contains_many(keys)
        todo = [i for i, p in enumerate(present) if not p]
        if not self.available:
            self.count(skipped=len(todo))
            return 0
        start = time.perf_counter()
        frame = HEADER_BYTES + self.block_nbytes
        written = 0
        with self._wlock:
            for at in range(0, len(todo), self._batch):
                idx = todo[at:at + self._batch]
                for j, i in enumerate(idx):
                    write_frame(self._wbuf[j], keys[i], src[i])
                try:
                    codes = list(self._call("batch_put_from", client.batch_put_from, [keys[i] for i in idx],
                                            [self._wbuf[j].data_ptr() for j in range(len(idx))],
                                            [frame] * len(idx), nbytes=frame * len(idx)))
                except _NoAnswer:
                    self.count(skipped=len(todo) - at)
                    break
                ok = sum(1 for c in codes if c == 0)
                written += ok
                self.count(skipped=len(idx) - ok)
                if not self._check(codes, "batch_put_from"):
                    self.count(skipped=len(todo) - at - len(idx))
                    break
        self.count(writes=1, write_bytes=written * frame, write_seconds=time.perf_counter() - start)
        return written

    def remove(self, keys: Sequence[str]) -> None:
        client = self._client
        if client is not None and self.available and keys:
            try:
                self._call("batch_remove", client.batch_remove, list(keys))
            except _NoAnswer:
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
            stuck = self._stuck
        self._rpc.shutdown(wait=not stuck, cancel_futures=True)
        if client is not None and not stuck:   # a call still inside the client: leave it to exit
            client.close()


def store_tier(config: EngineConfig, ctx: TierContext) -> MooncakeStoreTier | None:
    """--kv-store mooncake://HOST:PORT (tandem/kvstore/registry.py); Mooncake's transport settings
    are the handoff's (TransferConfig)."""
    cfg, t = config.kv_store, config.transfer
    if not cfg.store_url:
        return None
    return MooncakeStoreTier(cfg.store_url, cfg.store_segment_bytes, ctx.block_nbytes, cfg.batch_blocks,
                             t.mooncake_bind_address, cfg.retry_s, protocol=t.mooncake_protocol,
                             device=t.mooncake_device, call_timeout_s=cfg.store_timeout_s)
