"""Suffix decoding with a draft model behind it (as Arctic Inference pairs them): per request and
step, the suffix draft when it is confident (its score, the sum of its tokens' estimated
probabilities, reaches `min_score` or its limit), the draft model's otherwise.

Suffix drafts cost nothing to make and are long where the text repeats (a tool call's skeleton,
earlier calls and results); the draft model guesses the parts that do not repeat (the values of
this call) at the price of its forwards, which it pays only for the requests that need it.
`{"method": "suffix", "model": DRAFT_DIR}` selects it. The draft model's KV of a request
skipped by a step is caught up at its next use (tandem/spec/draft_model.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.config import SpeculativeConfig
from tandem.spec.draft_model import DraftModelProposer
from tandem.spec.suffix import SuffixProposer
from tandem.spec.target import SpecTarget

# the most greedy steps of a draft model behind suffix decoding (each one a forward of the draft)
_FALLBACK_DRAFT_K = 6


class SuffixWithDraftModel:
    def __init__(self, suffix: SuffixProposer, draft: DraftModelProposer, min_score: float = 2.0) -> None:
        self.suffix = suffix
        self.draft = draft
        self.min_score = min_score

    def propose(self, requests: Sequence, limits: Sequence[int]) -> list[list[int]]:
        out: list[list[int]] = []
        fallback: list[int] = []
        for i, (req, k) in enumerate(zip(requests, limits)):
            d = self.suffix.draft(req, min(k, self.suffix.k))
            if d.tokens and d.score >= min(self.min_score, k):
                out.append(d.tokens)
            else:
                out.append([])
                fallback.append(i)
        if fallback:
            drafts = self.draft.propose([requests[i] for i in fallback], [limits[i] for i in fallback])
            for i, d in zip(fallback, drafts):
                out[i] = d
        return out

    def observe(self, request, num_proposed: int, num_accepted: int) -> None:
        pass

    def finished(self, request) -> None:
        self.suffix.finished(request)
        self.draft.finished(request)


def build(cfg: SpeculativeConfig, target: SpecTarget | None) -> SuffixProposer | SuffixWithDraftModel:
    """{"method": "suffix"}, with a draft model behind it when "model" names one
    (tandem/spec/registry.py; make_proposer passes the target then)."""
    k = cfg.num_speculative_tokens
    suffix = SuffixProposer(k)
    if not cfg.model:
        return suffix
    # the draft model's greedy steps are the costly part
    return SuffixWithDraftModel(suffix, DraftModelProposer(min(k, _FALLBACK_DRAFT_K), cfg.model, target))
