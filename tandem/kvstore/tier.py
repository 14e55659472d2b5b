"""A tier: somewhere below the device that holds KV blocks by key (host memory, disk, the store).

Every tier moves whole blocks (`block_nbytes` bytes, the device layout's) and is thread-safe:
the engine thread asks `contains`, a loader thread reads and a saver thread writes. Reads fill
caller rows on any device and stop at the first block that is missing or does not check out
(a load needs an unbroken prefix). Writes copy from CPU rows and skip keys already held. A tier
evicts its own least recently used blocks to stay within its capacity and never blocks waiting
for room: what does not fit, or cannot be written now, is skipped and counted.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

@dataclass(frozen=True)
class TierContext:
    """What a tier's factory (tandem/kvstore/registry.py) knows of the engine it serves,
    besides the EngineConfig."""

    block_nbytes: int   # bytes of one device KV block: every tier moves whole blocks
    space: str          # the key space (model, layout, hash seed: keys.py) this engine's keys are in
    on_cuda: bool       # the device cache is on CUDA (host memory is then pinned)


COUNTERS = ("queries", "hits", "read_bytes", "write_bytes", "read_seconds", "write_seconds",
            "reads", "writes", "corrupt", "errors", "skipped", "evicted")


@dataclass
class TierCounters:
    """Cumulative, since start. Tokens for queries and hits, as the prefix-cache metrics."""

    queries: int = 0          # tokens past the device hit that this tier was asked for
    hits: int = 0             # tokens loaded from this tier
    read_bytes: int = 0
    write_bytes: int = 0
    read_seconds: float = 0.0  # time spent in reads (load latency, summed over read calls)
    write_seconds: float = 0.0
    reads: int = 0            # read calls (each at most `batch_blocks` blocks)
    writes: int = 0
    corrupt: int = 0          # values that failed their checks (treated as misses)
    errors: int = 0           # failed calls: store unreachable, disk full, I/O errors
    skipped: int = 0          # blocks not written: no room, tier unavailable, save backlog
    evicted: int = 0          # blocks dropped to make room


class Tier(abc.ABC):
    name: str = "tier"

    def __init__(self, block_nbytes: int) -> None:
        self.block_nbytes = block_nbytes
        self.counters = TierCounters()
        self._counter_lock = threading.Lock()

    def count(self, **amounts: float) -> None:
        with self._counter_lock:
            for name, amount in amounts.items():
                setattr(self.counters, name, getattr(self.counters, name) + amount)

    def snapshot(self) -> dict[str, float]:
        with self._counter_lock:
            return asdict(self.counters)

    @abc.abstractmethod
    def contains(self, key: str) -> bool:
        """The tier holds `key` now (it may still be gone when read)."""

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        return [self.contains(k) for k in keys]

    @abc.abstractmethod
    def read(self, keys: Sequence[str], dst: Sequence[torch.Tensor]) -> int:
        """Fill dst[i] ([block_nbytes] uint8, any device) with the block of keys[i], in order;
        returns how many leading blocks were read (it stops at the first miss or bad value)."""

    @abc.abstractmethod
    def write(self, keys: Sequence[str], src: torch.Tensor) -> int:
        """Store src[i] ([n, block_nbytes] uint8, CPU) under keys[i] where not held yet;
        returns how many blocks were written."""

    @abc.abstractmethod
    def remove(self, keys: Sequence[str]) -> None:
        """Drop the keys (unknown ones are ignored)."""

    @property
    @abc.abstractmethod
    def capacity_bytes(self) -> int: ...

    @property
    @abc.abstractmethod
    def used_bytes(self) -> int: ...

    @property
    def available(self) -> bool:
        """Reachable and serving; a store whose master is down is not."""
        return True

    def close(self) -> None:
        pass
