"""One request's grammar state: which tokens may come next, advanced by the tokens that came.

Proposals (the multi-token step) are checked and masked by advancing the state through them and
rolling it back: `mask_rows` fills one bitmask row per position of a sequence (the row after
proposals [:i]), `valid_prefix` cuts a draft at its first token the grammar rejects.

A stop token ends the grammar (`terminated`). Only a request that ignores it (ignore_eos) goes on,
and what follows is free: every token accepted, rows left unmasked.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class RequestGrammar:
    def __init__(self, compiled, vocab_size: int) -> None:
        import xgrammar as xgr

        self._matcher = xgr.GrammarMatcher(compiled, max_rollback_tokens=-1)
        self.vocab_size = vocab_size

    def accept(self, token_id: int) -> bool:
        """Advance by a generated token; False (and no change) if the grammar forbids it."""
        return self._matcher.is_terminated() or self._matcher.accept_token(token_id)

    @property
    def terminated(self) -> bool:
        """The grammar's end was reached (a stop token accepted at a complete match)."""
        return self._matcher.is_terminated()

    def valid_prefix(self, draft: Sequence[int]) -> int:
        """How many leading tokens of `draft` the grammar accepts (state unchanged after)."""
        if self._matcher.is_terminated():
            return len(draft)
        n = 0
        for token in draft:
            if not self._matcher.accept_token(token):
                break
            n += 1
            if self._matcher.is_terminated():   # a stop token: nothing may follow it
                break
        if n:
            self._matcher.rollback(n)
        return n

    def mask_rows(self, bitmask: torch.Tensor, first_row: int, proposed: Sequence[int]) -> None:
        """Fill rows first_row .. first_row + len(proposed) of `bitmask` ([R, ceil(V/32)] int32):
        row i allows the tokens that may follow proposals [:i]. Proposals were cut to the
        grammar's valid prefix beforehand (valid_prefix)."""
        if self._matcher.is_terminated():
            return   # past an ignored stop token: rows stay as allocated (every token allowed)
        self._matcher.fill_next_token_bitmask(bitmask, first_row)
        for i, token in enumerate(proposed):
            accepted = self._matcher.accept_token(token)
            assert accepted, "proposals are cut to the grammar's valid prefix before they are scheduled"
            if self._matcher.is_terminated():
                break   # a proposed stop token ends the request there: its row stays unmasked
            self._matcher.fill_next_token_bitmask(bitmask, first_row + i + 1)
        if proposed:
            self._matcher.rollback(len(proposed))
