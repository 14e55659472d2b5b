"""The row-parallel half of a tensor-parallel pair of linears.

A column-parallel linear needs no class of its own: it is a Linear holding rows
[rank * out / n, (rank + 1) * out / n) of the weight (its slice of heads or of the intermediate
dimension), and its outputs stay on the rank. The row-parallel linear that follows holds the
matching columns of its weight, so each rank computes a partial product of the full output;
`reduce` (an all-reduce over the tensor-parallel ranks) sums them. Its bias is held by the first
rank only, so that the sum carries it once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tandem.layers.linear import Linear


class RowParallelLinear(Linear):
    # weight [out, in / n] (this rank's columns); bias [out] on the first rank only
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x [T, in / n] (this rank's share of the features) -> [T, out], summed over the ranks
        y = super().forward(x)
        return self.reduce(y) if self.reduce is not None else y
