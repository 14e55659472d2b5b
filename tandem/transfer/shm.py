""""shm" data plane for workers on one host: the source's KV tensor lives in a file under /dev/shm.

The source's read reply names the file and the byte offset of block 0 of each of its ranks' KV
(tandem/transfer/shards.py: a worker without ranks has one); the sink maps each file once (cached)
and copies the selected blocks with one tensor copy per run of consecutive blocks and piece of a
block (the intersection of a source rank's shard with a destination rank's: whole blocks between
two workers without ranks), straight from the source rank's cache into the destination rank's.

File lifetime: created by `allocate_shm_kv` as `tandem-kv-<pid>-<token>`; removed when the source closes
or the process exits; files left by a killed process are removed by the next allocation on the host.
"""

from __future__ import annotations

import atexit
import os
import secrets
import socket
import threading
from collections import OrderedDict

import torch

from tandem.kv.layout import KVLayout
from tandem.transfer.base import TransferError, TransferSizeMismatch
from tandem.transfer.shards import KVShard, ShardedKV, copy_blocks

PREFIX = "tandem-kv-"
MAX_MAPPED_SOURCES = 16   # sink: shm files kept mapped at once (one per prefill worker)


def allocate_shm_kv(layout: KVLayout, num_blocks: int, shm_dir: str = "/dev/shm") -> torch.Tensor:
    """A zeroed KV tensor [num_blocks, *layout.block_shape] backed by a new shared file."""
    remove_stale_files(shm_dir)
    path = os.path.join(shm_dir, f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
    nbytes = num_blocks * layout.block_nbytes
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, nbytes)     # sparse: pages are zero and allocated on first touch
    finally:
        os.close(fd)
    atexit.register(_unlink_quietly, path)
    raw = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    return raw.view(layout.torch_dtype).view(num_blocks, *layout.block_shape)


def find_shm_file(kv: torch.Tensor, shm_dir: str = "/dev/shm") -> tuple[str, int] | None:
    """(path, byte offset of kv[0] in it) if kv's memory is a mapped file under shm_dir, else None."""
    if kv.device.type != "cpu":
        return None
    ptr = kv.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) < 6:
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5].strip()
            if lo <= ptr < hi and os.path.dirname(path) == shm_dir.rstrip("/"):
                return path, ptr - lo + int(parts[2], 16)
    return None


def remove_stale_files(shm_dir: str) -> None:
    """Remove KV files whose creating process is gone (a killed worker cannot clean up)."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            _unlink_quietly(os.path.join(shm_dir, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class ShmSourcePlane:
    kind = "shm"

    def __init__(self, files: list[tuple[KVShard, str, int]], layout: KVLayout) -> None:
        # (shard, file, byte offset of its block 0) per distinct shard of this worker's blocks
        self._files, self._nb = files, layout.block_nbytes

    def start(self) -> None:
        pass

    def describe(self, block_ids: list[int]) -> dict:
        return {"shm_parts": [{"path": p, "offset": o, "shard": s.to_list()} for s, p, o in self._files],
                "block_nbytes": self._nb}

    def stream(self, sock: socket.socket, block_ids: list[int]) -> None:
        pass    # the sink reads the shared files itself, while this read keeps the blocks pinned

    def close(self) -> None:
        for _, path, _ in self._files:
            _unlink_quietly(path)   # mapped memory stays valid for its processes and current sinks


class ShmSinkPlane:
    kind = "shm"

    def __init__(self, kv: ShardedKV, shm_dir: str = "/dev/shm") -> None:
        self._shm_dir = os.path.normpath(shm_dir)
        self._kv = kv                                  # this worker's blocks, maybe split over ranks
        self._nb = kv.layout.block_nbytes
        self._maps: OrderedDict[str, torch.Tensor] = OrderedDict()   # path -> uint8 view of the file
        self._lock = threading.Lock()     # pulls run on several threads

    def receive(self, sock: socket.socket, reply: dict, src_ids: list[int], dst_ids: list[int]) -> None:
        if int(reply["block_nbytes"]) != self._nb:
            raise TransferSizeMismatch(f"source blocks are {reply['block_nbytes']} bytes, here {self._nb}")
        layout = self._kv.layout
        files = reply.get("shm_parts") or [{"path": reply["shm_path"], "offset": reply["shm_offset"],
                                            "shard": KVShard.whole(layout).to_list()}]
        num_blocks = max(src_ids, default=-1) + 1      # the source's views need reach no further
        parts = []
        for f in files:
            shard = KVShard.from_list(f["shard"])
            path, offset, part = str(f["path"]), int(f["offset"]), shard.layout(layout)
            src = self._map(path)
            need = offset + num_blocks * part.block_nbytes
            if need > src.numel():
                raise TransferSizeMismatch(f"shm file {path} has {src.numel()} bytes, blocks need {need}")
            view = src[offset:need].view(part.torch_dtype).view(num_blocks, *part.block_shape)
            parts.append((shard, view))
        if num_blocks:
            copy_blocks(ShardedKV(layout, tuple(parts)), src_ids, self._kv, dst_ids)

    def _map(self, path: str) -> torch.Tensor:
        with self._lock:
            return self._map_locked(path)

    def _map_locked(self, path: str) -> torch.Tensor:
        if path in self._maps:
            self._maps.move_to_end(path)
            return self._maps[path]
        if (os.path.dirname(os.path.normpath(path)) != self._shm_dir
                or not os.path.basename(path).startswith(PREFIX)):
            raise TransferError(f"refusing to map {path!r}: not a tandem KV file in {self._shm_dir}")
        try:
            size = os.path.getsize(path)
        except OSError as exc:
            raise TransferError(f"cannot open the source's shm file {path} ({exc}); the shm transport "
                                "works only between processes of one host, use tcp across hosts") from exc
        self._maps[path] = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        while len(self._maps) > MAX_MAPPED_SOURCES:
            self._maps.popitem(last=False)
        return self._maps[path]

    def close(self) -> None:
        self._maps.clear()
