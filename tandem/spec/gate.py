"""Whether speculation pays at the current batch size, measured rather than assumed.

A draft token costs a verify row (and the proposer's own work); it pays when it is accepted
often enough to save a step. At batch 1 a step's time is mostly fixed costs, so almost any
acceptance pays; at large batches a step's time grows with its rows (compute-bound), and only
near-perfect drafts pay, by an amount that depends on the hardware, the model and the proposer.
A single decoding request always speculates: it is the latency-bound case speculation is for on
every device, and the per-request draft length (tandem/spec/adaptive.py) already stops drafts
that are not accepted. From `min_batch` (2) requests on, the gate measures whether it pays
(a few requests left at the end of a batch may still not pay for a draft model's catch-up
prefill): per batch-size bucket (decoding requests, by powers of two), it keeps
the seconds per generated token of recent steps with speculation on and off, and runs the
faster mode. The slower one is probed now and then (one step every `probe_every` steps; the
interval doubles, up to `max_probe_every`, each time a probe confirms the choice, and starts
over when the choice flips), so the cost of probing a losing mode stays small and a change of
traffic (prose turning into tool calls) is noticed.

A step's time is the time between two calls (the engine proposes once after every step: the
step's schedule, forward, update and proposals). Its tokens are what the requests of the
previous call gained, scaled to all of them (a request that finished in the step is not seen
again). Medians over a short window make a step slowed by a prefill chunk or by another process
an outlier, not a verdict.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class _Bucket:
    on: deque = field(default_factory=lambda: deque(maxlen=8))    # seconds per token, recent steps
    off: deque = field(default_factory=lambda: deque(maxlen=8))
    best: bool | None = None       # the faster mode, once both are measured
    probe_every: int = 0
    since_probe: int = 0


class SpeculationGate:
    def __init__(self, min_batch: int = 2, min_samples: int = 3, window: int = 8, probe_every: int = 16,
                 max_probe_every: int = 256, max_step_s: float = 5.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.min_batch = min_batch
        self.min_samples = min_samples
        self.window = window
        self.base_probe_every = probe_every
        self.max_probe_every = max_probe_every
        self.max_step_s = max_step_s     # a longer gap is idleness, not a step
        self.clock = clock
        self._buckets: dict[int, _Bucket] = {}
        self._last: tuple[bool, int, dict, float] | None = None   # mode, bucket, lengths, time

    def _bucket(self, key: int) -> _Bucket:
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(deque(maxlen=self.window), deque(maxlen=self.window),
                                             probe_every=self.base_probe_every)
        return b

    def speculate(self, requests: Sequence) -> bool:
        """Speculate in the coming step? Called once per step with the decoding requests."""
        now = self.clock()
        self._record(requests, now)
        if len(requests) < self.min_batch:
            return True
        key = len(requests).bit_length()
        b = self._bucket(key)
        if len(b.on) < self.min_samples or len(b.off) < self.min_samples:
            mode = len(b.on) <= len(b.off)           # explore, alternating
        else:
            best = statistics.median(b.on) <= statistics.median(b.off)
            if b.best is not None and best != b.best:
                b.probe_every = self.base_probe_every   # the choice flipped: watch closely again
            b.best = best
            b.since_probe += 1
            mode = best
            if b.since_probe >= b.probe_every:
                b.since_probe = 0
                b.probe_every = min(2 * b.probe_every, self.max_probe_every)
                mode = not best
        self._last = (mode, key, {r: len(r.all_token_ids) for r in requests}, now)
        return mode

    def _record(self, requests: Sequence, now: float) -> None:
        if self._last is None:
            return
        mode, key, lengths, then = self._last
        self._last = None
        elapsed = now - then
        gains = [len(r.all_token_ids) - lengths[r] for r in requests if r in lengths]
        if not gains or elapsed <= 0 or elapsed > self.max_step_s:
            return
        tokens = sum(gains) / len(gains) * len(lengths)
        if tokens <= 0:
            return
        b = self._bucket(key)
        (b.on if mode else b.off).append(elapsed / tokens)

    def modes(self) -> dict[int, bool | None]:
        """The chosen mode per bucket (None: still exploring), for tests and logs."""
        return {key: b.best for key, b in sorted(self._buckets.items())}
