"""What the scheduler hands the model runner: the sequences of one step (plain data, no policy).

A sequence has `num_computed_tokens` of its `num_tokens` tokens in its KV blocks. This step computes
`num_new_tokens` more, starting there. A decode may also carry `proposed` tokens (a draft to verify:
speculative decoding, or a scripted proposer in tests): they follow the request's own tokens, are
counted in `num_new_tokens`, and the runner returns a sampled token at each of their positions, so
that the engine's update can accept a prefix of them. Proposed tokens are not the request's tokens
until accepted: they are never hashed, cached or streamed before that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tandem.types import SamplingParams, TokenLogprob


class SeqState(Protocol):
    """The parts of a request's state the runner reads (the engine's Request provides them)."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    all_token_ids: list[int]
    num_computed_tokens: int
    sampling: SamplingParams
    prompt_logprobs: list[TokenLogprob]

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_prompt_tokens(self) -> int: ...

    @property
    def scores_prompt(self) -> bool: ...


@dataclass(frozen=True)
class ScheduledSeq:
    request: SeqState
    num_new_tokens: int          # tokens computed this step, proposals included
    sample: bool                 # this step reaches the end of the request's tokens: sample the next one
    proposed: tuple[int, ...] = ()  # draft tokens after the request's last token (sample is then True)

    @property
    def num_verified(self) -> int:
        """Positions sampled for this sequence: one per proposal, plus the token after them."""
        return len(self.proposed) + 1 if self.sample else 0


@dataclass(frozen=True)
class SampledSeq:
    """Tokens the target sampled at each position of a sequence: `token_ids[i]` follows the
    request's tokens and `proposed[:i]`. Without proposals, one token."""

    request: SeqState
    proposed: tuple[int, ...]
    token_ids: list[int]                    # [len(proposed) + 1]
    logprobs: list[TokenLogprob | None]     # [len(proposed) + 1]


def accepted_length(proposed: Sequence[int], sampled: Sequence[int]) -> int:
    """How many proposals the target agrees with: the longest prefix where proposal i equals the
    token sampled at its position. The target's token at the first disagreement (or after the last
    proposal) follows them, so a step yields `accepted + 1` tokens.

    Exact for any proposer that commits to one token per position (its draft distribution is
    one-hot), greedy or not: sampling y ~ p and keeping the proposal x only when y == x accepts x
    with probability p(x), and on a rejection y is distributed as p without x, renormalized, which
    is what rejection sampling against a one-hot draft gives. Drafts with a distribution of their
    own need rejection sampling against it instead.
    """
    n = 0
    for want, got in zip(proposed, sampled):
        if want != got:
            break
        n += 1
    return n
