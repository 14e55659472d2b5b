"""The proposer seam of the multi-token step: draft tokens for running decodes, verified next step.

After each step's update the engine asks its proposer (if any) for draft tokens for every request
that is decoding. The scheduler schedules them after the request's last token when they fit; the
runner samples the target at each of their positions; the update accepts the longest agreeing
prefix plus the target's next token (tandem/runner/scheduled.py: accepted_length). Output is the
same as without proposals, token for token under greedy sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tandem.engine.request import Request


class Proposer(Protocol):
    def propose(self, requests: Sequence[Request]) -> list[list[int]]:
        """Draft tokens for each request (an empty list: none), in order. The engine trims them to
        what max_tokens, the context and the request's grammar leave."""
        ...

    def observe(self, request: Request, num_proposed: int, num_accepted: int) -> None:
        """After a step verified `num_proposed` of the request's draft tokens: the first
        `num_accepted` agreed with the target."""
        ...

    def finished(self, request: Request) -> None:
        """The request left the engine (finished, aborted, handed over): drop its state."""
        ...
