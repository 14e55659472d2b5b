"""Gated SiLU MLP (Llama family): down(silu(gate(x)) * up(x))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tandem.kernels.fused_ops import FusedOps
from tandem.layers.linear import Linear


class GatedMLP(nn.Module):
    # single-pass CPU kernel for silu(gate) * up (set by the loader); None: torch ops
    fused: FusedOps | None = None

    def __init__(self, hidden: int, intermediate: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, bias=bias)
        self.up_proj = Linear(hidden, intermediate, bias=bias)
        self.down_proj = Linear(intermediate, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x [T, hidden] -> [T, hidden]
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.fused is not None and self.fused.supports(gate, up):
            return self.down_proj(self.fused.silu_mul(gate, up))
        return self.down_proj(F.silu(gate) * up)
