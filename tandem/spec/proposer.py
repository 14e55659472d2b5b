"""The proposer the engine drives: a drafting method (tandem/spec/ngram.py, suffix.py,
draft_model.py) behind the gate that decides whether speculation pays at this batch size
(tandem/spec/gate.py) and the per-request adaptive draft length (tandem/spec/adaptive.py).
Implements tandem/engine/proposer.py's Proposer.

A method drafts for the requests it is given, each at most its limit:
`propose(requests, limits) -> drafts`, plus the Proposer's `observe` and `finished`. It is asked
only about requests whose limit this step is positive, so a method with per-step costs (a draft
model's forwards) pays for the drafts that are wanted only.
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.spec.adaptive import AdaptiveDraftLength
from tandem.spec.gate import SpeculationGate


class AdaptiveProposer:
    def __init__(self, method, k: int, lengths: AdaptiveDraftLength | None,
                 gate: SpeculationGate | None = None) -> None:
        """`method`: see above; `k`: the longest draft; `lengths`: None drafts k for everyone;
        `gate`: None speculates at every step."""
        self.method = method
        self.k = k
        self.lengths = lengths
        self.gate = gate

    def propose(self, requests: Sequence) -> list[list[int]]:
        if self.gate is not None and not self.gate.speculate(requests):
            return [[] for _ in requests]
        limits = [self.k] * len(requests) if self.lengths is None else self.lengths.lengths(requests)
        wanted = [(r, k) for r, k in zip(requests, limits) if k > 0]
        if not wanted:
            return [[] for _ in requests]
        drafts = iter(self.method.propose([r for r, _ in wanted], [k for _, k in wanted]))
        return [next(drafts)[:k] if k > 0 else [] for k in limits]

    def observe(self, request, num_proposed: int, num_accepted: int) -> None:
        if self.lengths is not None:
            self.lengths.observe(request, num_proposed, num_accepted)
        self.method.observe(request, num_proposed, num_accepted)

    def finished(self, request) -> None:
        if self.lengths is not None:
            self.lengths.finished(request)
        self.method.finished(request)
