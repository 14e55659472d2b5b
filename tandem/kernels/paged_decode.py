"""Python face of paged_decode.c: decode attention that reads K/V blocks in place (CPU only).

`PagedDecodeKernel.load()` compiles the C source on first use (tandem.kernels.build); callers
that cannot use it (no compiler, another device or dtype) keep torch's SDPA path.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from tandem.kernels.build import KernelBuildConfig, load

SOURCE = Path(__file__).with_name("paged_decode.c")

_P = ctypes.c_void_p
_I = ctypes.c_int64
_ARGTYPES = [_P, _P, _I, _I, _I, _I, _I, _I, _P, _I, _P, _I, ctypes.c_float, _P, ctypes.c_int]


class PagedDecodeKernel:
    """Decode attention over a paged cache [num_blocks, num_layers, 2, block_size, kv_heads, D]
    that stores K/V in the query's type (float32, bfloat16) or in float8_e5m2."""

    DTYPES = (torch.float32, torch.bfloat16)
    graph_safe = False   # a CPU kernel: no CUDA graph replays it

    def __init__(self, lib: ctypes.CDLL) -> None:
        # (query dtype, cache dtype) -> entry point
        self._fns = {(torch.float32, torch.float32): lib.tandem_paged_decode_f32,
                     (torch.bfloat16, torch.bfloat16): lib.tandem_paged_decode_bf16,
                     (torch.float32, torch.float8_e5m2): lib.tandem_paged_decode_f32_e5m2,
                     (torch.bfloat16, torch.float8_e5m2): lib.tandem_paged_decode_bf16_e5m2}
        for fn in self._fns.values():
            fn.argtypes = _ARGTYPES
            fn.restype = ctypes.c_int

    @classmethod
    def load(cls, cfg: KernelBuildConfig = KernelBuildConfig()) -> "PagedDecodeKernel":
        """Raises KernelBuildError when the source cannot be compiled here."""
        return cls(load(SOURCE, cfg))

    def supports(self, q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
        return (q.device.type == "cpu" and kv_cache.device.type == "cpu"
                and (q.dtype, kv_cache.dtype) in self._fns and kv_cache.is_contiguous())

    def __call__(self, q: torch.Tensor, kv_cache: torch.Tensor, layer: int, block_table: torch.Tensor,
                 context_lens: torch.Tensor, scale: float) -> torch.Tensor:
        """q [B, H, D] -> [B, H, D]. block_table LongTensor[B, nb] (row i covers sequence i's
        first context_lens[i] positions), context_lens LongTensor[B], every length >= 1."""
        if not self.supports(q, kv_cache):
            raise ValueError(f"paged decode kernel: unsupported q {q.dtype}/{q.device} or cache "
                             f"{kv_cache.dtype}/{kv_cache.device} (contiguous={kv_cache.is_contiguous()})")
        q = q.contiguous()
        table = block_table.contiguous()
        lens = context_lens.contiguous()
        if table.dtype != torch.long or lens.dtype != torch.long:
            raise ValueError("paged decode kernel: block_table and context_lens must be int64")
        num_layers, _, block_size, kv_heads, head_dim = kv_cache.shape[1:]
        B, H, D = q.shape
        if D != head_dim or H % kv_heads or table.shape[0] != B or lens.shape[0] != B:
            raise ValueError(f"paged decode kernel: q {tuple(q.shape)}, cache {tuple(kv_cache.shape)}, "
                             f"table {tuple(table.shape)}, lens {tuple(lens.shape)} disagree")
        out = torch.empty_like(q)
        fn = self._fns[q.dtype, kv_cache.dtype]
        rc = fn(q.data_ptr(), kv_cache.data_ptr(), num_layers, layer, block_size, kv_heads, head_dim, H,
                table.data_ptr(), table.shape[1], lens.data_ptr(), B, scale, out.data_ptr(),
                torch.get_num_threads())
        if rc != 0:
            raise MemoryError("paged decode kernel: could not allocate its scratch memory")
        return out
