"""Python face of fused_ops.c: RMSNorm (with the residual add), SiLU(gate) * up and rotary
embedding as single passes on the CPU (float32 and bfloat16).

`FusedOps.load()` compiles the C source on first use (tandem.kernels.build). The layers call
these only for tensors `supports` accepts and keep their torch chains otherwise (another device
or dtype, or no compiler), so the model code is the same on every device.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from tandem.kernels.build import KernelBuildConfig, load

SOURCE = Path(__file__).with_name("fused_ops.c")

_P = ctypes.c_void_p
_I = ctypes.c_int64
_C = ctypes.c_int
_SIGNATURES = {
    "rms_norm": [_P, _I, _P, _P, _P, _I, _I, ctypes.c_float, _C],
    "silu_mul": [_P, _P, _I, _P, _I, _I, _C],
    "rotary": [_P, _I, _P, _P, _I, _I, _I, _C],
}
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """x as a [rows, x.shape[-1]] view with a contiguous last dimension (a copy only for layouts
    no such view reads, which the layers never pass)."""
    flat = x.reshape(-1, x.shape[-1])
    return flat if flat.stride(-1) == 1 or flat.shape[-1] == 1 else flat.contiguous()


class FusedOps:
    DTYPES = tuple(_SUFFIX)

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._fns: dict[tuple[str, torch.dtype], ctypes._CFuncPtr] = {}
        for name, argtypes in _SIGNATURES.items():
            for dtype, suffix in _SUFFIX.items():
                fn = getattr(lib, f"tandem_{name}_{suffix}")
                fn.argtypes = argtypes
                fn.restype = None
                self._fns[(name, dtype)] = fn

    @classmethod
    def load(cls, cfg: KernelBuildConfig = KernelBuildConfig()) -> "FusedOps":
        """Raises KernelBuildError when the source cannot be compiled here."""
        return cls(load(SOURCE, cfg))

    @staticmethod
    def supports(*tensors: torch.Tensor) -> bool:
        first = tensors[0]
        return all(t.device.type == "cpu" and t.dtype == first.dtype for t in tensors) and first.dtype in _SUFFIX

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
        """RMSNorm of x [..., dim] (of x + residual, stored into `residual` in place, when given;
        residual must be contiguous with x's shape). Returns a new contiguous tensor."""
        rows_view = _as_rows(x)
        dim = x.shape[-1]
        if weight.shape != (dim,) or not weight.is_contiguous():
            raise ValueError(f"fused rms_norm: weight {tuple(weight.shape)} for rows of {dim}")
        if residual is not None and (residual.shape != x.shape or not residual.is_contiguous()):
            raise ValueError(f"fused rms_norm: residual {tuple(residual.shape)} for x {tuple(x.shape)}")
        out = torch.empty(x.shape, dtype=x.dtype)
        self._fns[("rms_norm", x.dtype)](rows_view.data_ptr(), rows_view.stride(0),
                                         residual.data_ptr() if residual is not None else None,
                                         weight.data_ptr(), out.data_ptr(), rows_view.shape[0], dim, eps,
                                         torch.get_num_threads())
        return out

    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up for gate, up [T, n] (read in place when they share a row stride, e.g.
        the halves of one [T, 2n] product). Returns a new contiguous [T, n]."""
        if up.shape != gate.shape or gate.dim() != 2:
            raise ValueError(f"fused silu_mul: gate {tuple(gate.shape)} and up {tuple(up.shape)} must be one [T, n] shape")
        gate, up = _as_rows(gate), _as_rows(up)
        if gate.stride(0) != up.stride(0):
            gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty(gate.shape, dtype=gate.dtype)
        self._fns[("silu_mul", gate.dtype)](gate.data_ptr(), up.data_ptr(), gate.stride(0), out.data_ptr(),
                                            gate.shape[0], gate.shape[1], torch.get_num_threads())
        return out

    def rotary_(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotary embedding of x [T, heads, D] in place (heads contiguous within a token);
        cos/sin [T, 1, D/2] or [T, D/2] contiguous. Returns x."""
        T, heads, D = x.shape
        if x.stride(2) != 1 or x.stride(1) != D:
            raise ValueError("fused rotary: each token's heads must be contiguous (it works in place)")
        if cos.numel() != T * (D // 2) or sin.numel() != cos.numel() or not (cos.is_contiguous() and sin.is_contiguous()):
            raise ValueError(f"fused rotary: cos/sin {tuple(cos.shape)} for x {tuple(x.shape)}")
        self._fns[("rotary", x.dtype)](x.data_ptr(), x.stride(0), cos.data_ptr(), sin.data_ptr(), T, heads, D,
                                       torch.get_num_threads())
        return x
