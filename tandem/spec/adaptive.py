"""How many draft tokens pay, per request and per step: speculation adapted to what it achieves.

A request's drafts are accepted position by position until the first miss, so its record is a
geometric one: with per-position acceptance a, the j-th draft token is used with probability a^j.
Each request keeps decayed counts of accepted positions and tried positions (a miss ends the
tries of a step), so a = accepted / tried, starting from a prior of 1/2. Its draft length is the
largest j <= k_max with a^j >= `min_use_probability`: a draft token that would most likely be
thrown away costs a verify position and buys nothing. The default (0.1) is low because a verify
position costs little next to the step it saves at small batches; at large batches, where rows
cost, the speculation gate (tandem/spec/gate.py) decides whether to draft at all. A method that
sizes each draft by its own estimate of the draft's probability (suffix decoding) is not
shortened (`shorten=False`), only switched off when its acceptance is below the threshold.
A request whose drafts stopped paying gets none, except one probe token every `probe_every`
steps, so it can recover when its text becomes predictable again (a tool call after prose).
Finally the step's drafts are capped at `max_tokens_per_step` in total, longest-first trimming,
so large batches (compute-bound steps) are not slowed down by verification work.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class _Record:
    accepted: float = 1.0     # decayed counts, prior 1/2 (one accepted of two tried)
    tried: float = 2.0
    steps_without: int = 0    # steps since the request last got a draft


class AdaptiveDraftLength:
    def __init__(self, k_max: int, max_tokens_per_step: int, min_use_probability: float = 0.1,
                 probe_every: int = 8, decay: float = 0.8, shorten: bool = True) -> None:
        self.k_max = k_max
        self.max_tokens_per_step = max_tokens_per_step
        self.min_use_probability = min_use_probability
        self.probe_every = probe_every
        self.decay = decay
        self.shorten = shorten
        self._records: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _record(self, req) -> _Record:
        rec = self._records.get(req)
        if rec is None:
            rec = self._records[req] = _Record()
        return rec

    def acceptance(self, req) -> float:
        rec = self._record(req)
        return rec.accepted / rec.tried

    def lengths(self, requests: Sequence) -> list[int]:
        """Draft length for each request this step."""
        out = []
        for req in requests:
            rec = self._record(req)
            a, k, use = rec.accepted / rec.tried, 0, 1.0
            while k < self.k_max and use * a >= self.min_use_probability:
                use *= a
                k += 1
            if k and not self.shorten:
                k = self.k_max
            if k == 0 and rec.steps_without + 1 >= self.probe_every:
                k = 1   # a probe
            rec.steps_without = 0 if k else rec.steps_without + 1
            out.append(k)
        excess = sum(out) - self.max_tokens_per_step
        while excess > 0:   # trim the longest drafts first, one token at a time
            i = max(range(len(out)), key=out.__getitem__)
            out[i] -= 1
            excess -= 1
        return out

    def finished(self, req) -> None:
        self._records.pop(req, None)

    def observe(self, req, num_proposed: int, num_accepted: int) -> None:
        """A step verified `num_proposed` draft tokens of `req`, the first `num_accepted` agreed."""
        if num_proposed == 0:
            return
        rec = self._record(req)
        tried = num_accepted + (1 if num_accepted < num_proposed else 0)
        rec.accepted = self.decay * rec.accepted + num_accepted
        rec.tried = self.decay * rec.tried + tried
