"""KV events: which block hashes a worker stored or evicted, for the gateway's prefix index.

A bounded log with sequence numbers. A reader asks for events after the last sequence
number it saw; if the log has dropped events it needs, it is told to resynchronise
(`EventBatch.reset`), and the batch then carries a `cleared` event followed by one
`stored` event listing every block hash currently cached.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class KVEvent:
    seq: int
    kind: str                      # "stored" | "removed" | "cleared"
    block_hashes: tuple[int, ...]

    def to_dict(self) -> dict:
        return {"seq": self.seq, "type": self.kind, "block_hashes": [str(h) for h in self.block_hashes]}


@dataclass(frozen=True)
class EventBatch:
    seq: int                     # the newest sequence number covered by this batch
    events: tuple[KVEvent, ...]
    reset: bool                  # the reader missed events: events start with "cleared"

    def to_dict(self) -> dict:
        return {"seq": self.seq, "reset": self.reset, "events": [e.to_dict() for e in self.events]}


class KVEventLog:
    """Append from the engine thread, read from the HTTP thread. Thread-safe."""

    def __init__(self, capacity: int = 8192) -> None:
        self._events: deque[KVEvent] = deque(maxlen=capacity)
        self._seq = 0
        self._lock = threading.Lock()

    def append(self, kind: str, block_hashes: tuple[int, ...]) -> None:
        if not block_hashes and kind != "cleared":
            return
        with self._lock:
            self._seq += 1
            self._events.append(KVEvent(self._seq, kind, block_hashes))

    def since(self, seq: int, snapshot: Callable[[], tuple[int, ...]]) -> EventBatch:
        """Events with sequence number > seq; `snapshot` lists cached hashes for a resync."""
        with self._lock:
            oldest = self._events[0].seq if self._events else self._seq + 1
            if oldest - 1 <= seq <= self._seq:
                events = tuple(e for e in self._events if e.seq > seq)
                return EventBatch(self._seq, events, reset=False)
            now = self._seq
        hashes = snapshot()
        return EventBatch(now, (KVEvent(now, "cleared", ()), KVEvent(now, "stored", hashes)), reset=True)
