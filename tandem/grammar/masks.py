"""Token bitmasks for a step's sampled rows: allocated by the engine, applied by the runner.

A bitmask is int32 [rows, ceil(vocab / 32)], bit j of a row set when token j is allowed (xgrammar's
layout). `GrammarMasks.rows` are the indices, among the step's sampled rows, that have a grammar;
rows without one are left untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GrammarMasks:
    bitmask: torch.Tensor   # int32 [S, ceil(V / 32)], one row per sampled row of the step
    rows: list[int]         # sampled rows that are constrained


def allocate(num_rows: int, vocab_size: int) -> torch.Tensor:
    import xgrammar as xgr

    return xgr.allocate_token_bitmask(num_rows, vocab_size)


def apply(logits: torch.Tensor, masks: GrammarMasks) -> None:
    """Forbidden tokens of the constrained rows get -inf, in place. logits: float [S, V]."""
    import xgrammar as xgr

    bitmask = masks.bitmask if masks.bitmask.device == logits.device else masks.bitmask.to(logits.device)
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=logits.shape[-1], indices=masks.rows)
