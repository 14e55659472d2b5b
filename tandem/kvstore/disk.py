"""The disk tier: one file per block under a directory, named by its key, kept across restarts.

    <dir>/<space>/<tenant>/<first two hex digits of the hash>/<hash>.kvb   (frame.py: header + bytes)

A worker started on the same directory finds its blocks again: it lists the files of its own key
space (model and layout, keys.py) at start, oldest modification first, and trims them to the
capacity. A file is used only if its header names the expected key and size and its checksum
holds; a bad file is deleted and counted. Reads touch the file's modification time, so the least
recently used order survives a restart. Writes go to a temporary name and are renamed into place
(a crash leaves no half-written block under a real name). When the file system is full the tier
stops writing for `retry_s` seconds and keeps serving reads.

Invariant: `_files` (key -> bytes, least recently used first) lists exactly the files counted in
`_used`.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch

from tandem.config import EngineConfig
from tandem.kvstore.frame import HEADER_BYTES, CorruptValue, check_frame, header
from tandem.kvstore.tier import Tier, TierContext

log = logging.getLogger(__name__)

SUFFIX = ".kvb"
_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskTier(Tier):
    name = "disk"

    def __init__(self, root: str | os.PathLike, capacity_bytes: int, space: str, block_nbytes: int,
                 retry_s: float = 5.0, clock=time.monotonic) -> None:
        super().__init__(block_nbytes)
        self.root = Path(root)
        self.dir = self.root / space
        self.dir.mkdir(parents=True, exist_ok=True)
        self._capacity = capacity_bytes
        self._retry_s = retry_s
        self._clock = clock
        self._files: OrderedDict[str, int] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._paused_until = 0.0   # no writes before this time (the file system was full)
        self._scan()

    # --- start-up ----------------------------------------------------------------------------
    def _scan(self) -> None:
        """Find the blocks a previous run left, least recently used first; trim to capacity."""
        found: list[tuple[int, str, int]] = []
        for dirpath, _, names in os.walk(self.dir):
            for name in names:
                path = os.path.join(dirpath, name)
                if not name.endswith(SUFFIX):
                    _unlink(path)   # an interrupted write
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                rel = Path(path).relative_to(self.dir).parts   # tenant, fan-out, file
                if len(rel) != 3:
                    continue
                key = f"{self.dir.name}/{rel[0]}/{rel[2].removesuffix(SUFFIX)}"
                found.append((st.st_mtime_ns, key, st.st_size))
        found.sort()
        for _, key, size in found:
            self._files[key] = size
            self._used += size
        evicted = self._evict_to(self._capacity)
        if found:
            log.info("disk KV tier %s: %d blocks from an earlier run (%d over capacity removed)",
                     self.dir, len(self._files), evicted)

    # --- the tier ------------------------------------------------------------------------------
    def path(self, key: str) -> Path:
        _, tenant, digest = key.split("/")
        return self.dir / tenant / digest[:2] / (digest + SUFFIX)

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    @property
    def used_bytes(self) -> int:
        return self._used

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._files)

    def contains(self, key: str) -> bool:
        return key in self._files

    def read(self, keys: Sequence[str], dst: Sequence[torch.Tensor]) -> int:
        start = time.perf_counter()
        frame = torch.empty(HEADER_BYTES + self.block_nbytes, dtype=torch.uint8)
        n = 0
        for key, row in zip(keys, dst):
            path = self.path(key)
            try:
                with open(path, "rb") as f:
                    got = f.readinto(frame.numpy())
                if got != frame.numel():
                    raise CorruptValue(f"file is truncated ({got} bytes)")
                row.copy_(check_frame(frame, key, self.block_nbytes))
                os.utime(path)
            except FileNotFoundError:
                self._forget(key)
                break
            except (CorruptValue, OSError) as exc:
                log.warning("disk KV tier: %s is unusable (%s); removed", path, exc)
                self.count(corrupt=1)
                self._forget(key)
                _unlink(path)
                break
            with self._lock:
                if key in self._files:
                    self._files.move_to_end(key)
            n += 1
        self.count(reads=1, read_bytes=n * self.block_nbytes, read_seconds=time.perf_counter() - start)
        return n

    def write(self, keys: Sequence[str], src: torch.Tensor) -> int:
        if self._clock() < self._paused_until:
            self.count(skipped=len(keys))
            return 0
        start = time.perf_counter()
        size = HEADER_BYTES + self.block_nbytes
        written = 0
        for i, (key, row) in enumerate(zip(keys, src)):
            if key in self._files:
                continue
            if size > self._capacity:
                self.count(skipped=len(keys) - i)
                break
            with self._lock:
                self.count(evicted=self._evict_to(self._capacity - size))
            path = self.path(key)
            tmp = path.with_name(path.name + f".{threading.get_ident()}.tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as f:
                    f.write(header(key, row))
                    f.write(row.numpy())
                os.replace(tmp, path)
            except OSError as exc:
                _unlink(tmp)
                self.count(errors=1, skipped=len(keys) - i)
                if exc.errno in _FULL:
                    self._paused_until = self._clock() + self._retry_s
                    log.warning("disk KV tier %s: the file system is full (%s); not writing for %.0f s, "
                                "still serving reads", self.dir, exc.strerror, self._retry_s)
                else:
                    log.warning("disk KV tier: writing %s failed (%s)", path, exc)
                break
            with self._lock:
                self._files[key] = size
                self._used += size
            written += 1
        self.count(writes=1, write_bytes=written * size, write_seconds=time.perf_counter() - start)
        return written

    def remove(self, keys: Sequence[str]) -> None:
        for key in keys:
            if self._forget(key):
                _unlink(self.path(key))

    # --- bookkeeping ---------------------------------------------------------------------------
    def _forget(self, key: str) -> bool:
        with self._lock:
            size = self._files.pop(key, None)
            if size is None:
                return False
            self._used -= size
            return True

    def _evict_to(self, limit: int) -> int:
        """Delete least recently used files until at most `limit` bytes are used (lock held)."""
        n = 0
        while self._files and self._used > limit:
            key, size = self._files.popitem(last=False)
            self._used -= size
            _unlink(self.path(key))
            n += 1
        return n


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def disk_tier(config: EngineConfig, ctx: TierContext) -> DiskTier | None:
    """--kv-disk-dir DIR (tandem/kvstore/registry.py)."""
    cfg = config.kv_store
    if not cfg.disk_dir:
        return None
    return DiskTier(cfg.disk_dir, cfg.disk_bytes, ctx.space, ctx.block_nbytes, cfg.retry_s)
