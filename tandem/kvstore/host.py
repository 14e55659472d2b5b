"""The host-memory tier: a fixed buffer of block slots in RAM (page-locked when the KV cache is
on a CUDA device, so copies to and from it run at full bus speed), least recently used first out.

Invariant: `_slots` (key -> slot, oldest first) and `_free` partition the slots.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
import threading

import torch

from tandem.config import EngineConfig
from tandem.kvstore.tier import Tier, TierContext


class HostTier(Tier):
    name = "host"

    def __init__(self, capacity_bytes: int, block_nbytes: int, pin_memory: bool = False) -> None:
        super().__init__(block_nbytes)
        num_slots = capacity_bytes // block_nbytes
        if num_slots < 1:
            raise ValueError(f"--kv-host-memory {capacity_bytes} bytes holds no block of {block_nbytes} bytes")
        # [num_slots, block_nbytes]; pages are touched only when a slot is first written
        self.buf = torch.empty((num_slots, block_nbytes), dtype=torch.uint8, pin_memory=pin_memory)
        self._slots: OrderedDict[str, int] = OrderedDict()
        self._free = list(range(num_slots - 1, -1, -1))   # popped from the end: slot 0 first
        self._lock = threading.Lock()   # held across copies: a slot is never reused mid-copy

    @property
    def num_slots(self) -> int:
        return self.buf.shape[0]

    @property
    def capacity_bytes(self) -> int:
        return self.num_slots * self.block_nbytes

    @property
    def used_bytes(self) -> int:
        return len(self._slots) * self.block_nbytes

    def keys(self) -> list[str]:
        """Held keys, least recently used first."""
        with self._lock:
            return list(self._slots)

    def contains(self, key: str) -> bool:
        return key in self._slots   # a dict lookup is atomic under the GIL

    def read(self, keys: Sequence[str], dst: Sequence[torch.Tensor]) -> int:
        start = time.perf_counter()
        n = 0
        with self._lock:
            for key, row in zip(keys, dst):
                slot = self._slots.get(key)
                if slot is None:
                    break
                self._slots.move_to_end(key)
                row.copy_(self.buf[slot])
                n += 1
        self.count(reads=1, read_bytes=n * self.block_nbytes, read_seconds=time.perf_counter() - start)
        return n

    def write(self, keys: Sequence[str], src: torch.Tensor) -> int:
        start = time.perf_counter()
        written = evicted = 0
        with self._lock:
            for key, row in zip(keys, src):
                if key in self._slots:
                    self._slots.move_to_end(key)
                    continue
                if not self._free:
                    _, slot = self._slots.popitem(last=False)
                    self._free.append(slot)
                    evicted += 1
                slot = self._free.pop()
                self.buf[slot].copy_(row)
                self._slots[key] = slot
                written += 1
        self.count(writes=1, write_bytes=written * self.block_nbytes, evicted=evicted,
                   write_seconds=time.perf_counter() - start)
        return written

    def remove(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                slot = self._slots.pop(key, None)
                if slot is not None:
                    self._free.append(slot)


def host_tier(config: EngineConfig, ctx: TierContext) -> HostTier | None:
    """--kv-host-memory SIZE (tandem/kvstore/registry.py)."""
    cfg = config.kv_store
    return HostTier(cfg.host_bytes, ctx.block_nbytes, pin_memory=ctx.on_cuda) if cfg.host_bytes else None
