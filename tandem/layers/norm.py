"""RMSNorm, computed in float32 and cast back (the order Hugging Face's Llama uses), optionally
after the residual add: `add_forward(x, residual)` is norm(residual + x) and the new residual."""

from __future__ import annotations

import torch
from torch import nn

from tandem.kernels.fused_ops import FusedOps


class RMSNorm(nn.Module):
    # single-pass CPU kernel (set by the loader); None, or a tensor it does not support: torch ops
    fused: FusedOps | None = None

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x [..., dim] in the model dtype -> same shape and dtype
        if self.fused is not None and self.fused.supports(x, self.weight):
            return self.fused.rms_norm(x, self.weight, self.eps)
        return self._torch_norm(x)

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(residual + x), residual + x), the sum rounded to the model dtype. x and residual
        [T, dim]; `residual` may be overwritten by the sum (the caller hands it over)."""
        if self.fused is not None and self.fused.supports(x, residual, self.weight) and residual.is_contiguous():
            return self.fused.rms_norm(x, self.weight, self.eps, residual=residual), residual
        s = residual + x
        return self._torch_norm(s), s

    def _torch_norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)
