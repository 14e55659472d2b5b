"""Auxiliary hidden states: the seam through which a proposer fed by the target's own hidden
states (EAGLE-3, tandem/spec/eagle3.py) receives them (mechanism only).

A consumer installs an `AuxHiddenTap` on the target model (`model.aux_tap = tap`; the model's
`forward_aux` must exist). While one is installed, the model runner runs each step's forward with
`forward_aux(..., tap.layers)` and hands the tap the residual stream after those layers for every
row it computed (prompt chunks, decodes and verify rows alike) before sampling. With no tap
installed (the default) the runner calls the plain forward: nothing is captured, nothing costs.
The hidden output, and so the sampled tokens, are the same with or without a tap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from tandem.runner.scheduled import SeqState


@dataclass(frozen=True)
class AuxSpan:
    request: SeqState
    first_position: int     # the position of the request's first row in this step
    num_rows: int           # its rows (own tokens, then proposals), contiguous in the flat input
    row_start: int          # its first row in AuxHiddenStep.hidden


@dataclass(frozen=True)
class AuxHiddenStep:
    """One step's captured states. Rows past a request's accepted tokens (rejected proposals) are
    included: the consumer keeps what the request's token count says is valid."""

    spans: list[AuxSpan]
    hidden: torch.Tensor    # [T, len(layers), hidden]: the step's flat rows, in input order


class AuxHiddenTap(Protocol):
    layers: tuple[int, ...]   # layer indices (0-based) whose output stream is captured

    def deliver(self, step: AuxHiddenStep) -> None:
        """Called once per forward of the runner, after it and before sampling."""
        ...
