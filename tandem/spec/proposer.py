"""The proposer the engine drives: a drafting method (tandem/spec/ngram.py, ...) behind the
adaptive draft length (tandem/spec/adaptive.py). Implements tandem/engine/proposer.py's Proposer."""

from __future__ import annotations

from collections.abc import Sequence

from tandem.spec.adaptive import AdaptiveDraftLength


class AdaptiveProposer:
    def __init__(self, method, lengths: AdaptiveDraftLength | None) -> None:
        """`method`: propose(requests) -> drafts of at most its own k; `lengths`: None keeps them."""
        self.method = method
        self.lengths = lengths

    def propose(self, requests: Sequence) -> list[list[int]]:
        if self.lengths is None:
            return self.method.propose(requests)
        limits = self.lengths.lengths(requests)
        wanted = [r for r, k in zip(requests, limits) if k > 0]
        drafts = iter(self.method.propose(wanted) if wanted else [])
        return [next(drafts)[:k] if k > 0 else [] for k in limits]

    def observe(self, request, num_proposed: int, num_accepted: int) -> None:
        if self.lengths is not None:
            self.lengths.observe(request, num_proposed, num_accepted)
        self.method.observe(request, num_proposed, num_accepted)

    def finished(self, request) -> None:
        if self.lengths is not None:
            self.lengths.finished(request)
        self.method.finished(request)
