"""Book-keeping of offered (pinned) blocks on the prefill side. Pure logic with an injected clock.

Invariants:
- an offered request is released exactly once, into the queue drained by `drain()`;
- a request is never released while a reader is active (its bytes may still be in flight);
- once confirmed, timed out or withdrawn a request cannot be read again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Pin:
    block_ids: tuple[int, ...]
    deadline: float
    readers: int = 0
    done: bool = False      # confirmed or withdrawn: release as soon as readers == 0
    reason: str = ""


class PinTable:
    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._pins: dict[str, _Pin] = {}
        self._released: list[str] = []
        self._lock = threading.Lock()
        self.counts = {"confirmed": 0, "timeout": 0, "withdrawn": 0}

    def offer(self, request_id: str, block_ids: list[int]) -> None:
        with self._lock:
            if request_id in self._pins:
                raise ValueError(f"request {request_id!r} is already offered for transfer")
            self._pins[request_id] = _Pin(tuple(int(b) for b in block_ids), self._clock() + self._timeout_s)

    def begin_read(self, request_id: str) -> tuple[int, ...] | None:
        """Block ids of the request, counted as one active reader; None if not (or no longer) offered."""
        with self._lock:
            self._expire_locked()
            pin = self._pins.get(request_id)
            if pin is None or pin.done:
                return None
            pin.readers += 1
            return pin.block_ids

    def end_read(self, request_id: str) -> None:
        with self._lock:
            pin = self._pins.get(request_id)
            if pin is None:
                return
            pin.readers -= 1
            self._maybe_release_locked(request_id, pin)

    def finish(self, request_id: str, reason: str) -> bool:
        """Mark confirmed ("confirmed") or given up ("withdrawn"); False if unknown or already finished."""
        with self._lock:
            pin = self._pins.get(request_id)
            if pin is None or pin.done:
                return False
            pin.done, pin.reason = True, reason
            self._maybe_release_locked(request_id, pin)
            return True

    def drain(self) -> list[str]:
        with self._lock:
            self._expire_locked()
            out, self._released = self._released, []
            return out

    def num_pinned(self) -> int:
        with self._lock:
            return len(self._pins)

    def num_readers(self) -> int:
        with self._lock:
            return sum(p.readers for p in self._pins.values())

    def _expire_locked(self) -> None:
        now = self._clock()
        for rid, pin in list(self._pins.items()):
            if not pin.done and pin.readers == 0 and now >= pin.deadline:
                pin.done, pin.reason = True, "timeout"
                self._maybe_release_locked(rid, pin)

    def _maybe_release_locked(self, request_id: str, pin: _Pin) -> None:
        if pin.done and pin.readers == 0:
            del self._pins[request_id]
            self._released.append(request_id)
            self.counts[pin.reason] += 1
