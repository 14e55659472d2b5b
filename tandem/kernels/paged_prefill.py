"""Python face of paged_prefill.c: a prefill chunk's attention over its whole context, read from
the paged cache, with AMX tile multiplies or AVX-512 BF16 dot products (CPU, bfloat16 queries; a
bfloat16 or float8_e5m2 cache).

`PagedPrefillKernel.load()` compiles the C source on first use (tandem.kernels.build) and returns
None where neither can run (a CPU without AVX-512 BF16); callers then keep torch's SDPA path.
`backend` names the one that runs: "amx" where the CPU has AMX tiles and the OS grants them,
else "avx512-bf16".
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from tandem.kernels.build import KernelBuildConfig, load

SOURCE = Path(__file__).with_name("paged_prefill.c")

_P = ctypes.c_void_p
_I = ctypes.c_int64
_ARGTYPES = [_P, _P, _I, _I, _I, _I, _I, _I, _P, _I, _I, ctypes.c_float, _P, _P, _P, ctypes.c_int]
_ERRORS = {-1: "out of memory", -2: "no AVX-512 BF16 in this build", -3: "head_dim must be a multiple of 32, at most 256"}
_BACKENDS = {1: "avx512-bf16", 2: "amx"}   # tandem_prefill_backend()


class PagedPrefillKernel:
    """Causal attention of one sequence's new tokens over a paged cache
    [num_blocks, num_layers, 2, block_size, kv_heads, D] (the new tokens' K/V already written)."""

    DTYPE = torch.bfloat16
    CACHE_DTYPES = (torch.bfloat16, torch.float8_e5m2)

    def __init__(self, lib: ctypes.CDLL, backend: str) -> None:
        self.backend = backend
        self._fns = {torch.bfloat16: lib.tandem_paged_prefill_bf16,         # by cache dtype
                     torch.float8_e5m2: lib.tandem_paged_prefill_bf16_e5m2}
        for fn in self._fns.values():
            fn.argtypes = _ARGTYPES
            fn.restype = ctypes.c_int

    @classmethod
    def load(cls, cfg: KernelBuildConfig = KernelBuildConfig()) -> "PagedPrefillKernel | None":
        """None when this build has neither AMX nor AVX-512 BF16; raises KernelBuildError when
        the source cannot be compiled here."""
        lib = load(SOURCE, cfg)
        lib.tandem_prefill_backend.restype = ctypes.c_int
        backend = _BACKENDS.get(lib.tandem_prefill_backend())
        return cls(lib, backend) if backend else None

    @staticmethod
    def supports(q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
        return (q.device.type == "cpu" and kv_cache.device.type == "cpu"
                and q.dtype == PagedPrefillKernel.DTYPE and kv_cache.dtype in PagedPrefillKernel.CACHE_DTYPES
                and kv_cache.is_contiguous() and q.shape[-1] % 32 == 0 and q.shape[-1] <= 256)

    @staticmethod
    def scratch_numel(kv_cache: torch.Tensor, context_len: int) -> int:
        """Elements of each scratch buffer (packed K, packed V) a call over `context_len`
        positions needs."""
        kv_heads, head_dim = kv_cache.shape[4:]
        return kv_heads * (-(-context_len // 32) * 32) * head_dim

    def __call__(self, q: torch.Tensor, kv_cache: torch.Tensor, layer: int, block_ids: torch.Tensor,
                 num_computed: int, scale: float, k_scratch: torch.Tensor,
                 v_scratch: torch.Tensor) -> torch.Tensor:
        """q [n, H, D] (rows at positions num_computed .. num_computed + n - 1) -> [n, H, D].
        block_ids LongTensor covering the first num_computed + n positions; k_scratch, v_scratch
        two distinct bf16 tensors of at least scratch_numel(kv_cache, num_computed + n) elements."""
        if not self.supports(q, kv_cache):
            raise ValueError(f"paged prefill kernel: unsupported q {q.dtype}/{q.device}/{tuple(q.shape)} "
                             f"or cache {kv_cache.dtype}/{kv_cache.device}")
        q = q.contiguous()
        ids = block_ids.contiguous()
        num_layers, _, block_size, kv_heads, head_dim = kv_cache.shape[1:]
        n, H, D = q.shape
        ctx = num_computed + n
        if (D != head_dim or H % kv_heads or ids.dtype != torch.long
                or ids.shape[0] * block_size < ctx or num_computed < 0 or n < 1):
            raise ValueError(f"paged prefill kernel: q {tuple(q.shape)}, cache {tuple(kv_cache.shape)}, "
                             f"{ids.shape[0]} blocks ({ids.dtype}), num_computed {num_computed} disagree")
        need = self.scratch_numel(kv_cache, ctx)
        for scratch in (k_scratch, v_scratch):
            if scratch.dtype != self.DTYPE or not scratch.is_contiguous() or scratch.numel() < need:
                raise ValueError("paged prefill kernel: scratch too small or not contiguous bf16")
        out = torch.empty_like(q)
        fn = self._fns[kv_cache.dtype]
        rc = fn(q.data_ptr(), kv_cache.data_ptr(), num_layers, layer, block_size, kv_heads, head_dim, H,
                ids.data_ptr(), num_computed, n, scale, k_scratch.data_ptr(), v_scratch.data_ptr(),
                out.data_ptr(), torch.get_num_threads())
        if rc != 0:
            raise RuntimeError(f"paged prefill kernel: {_ERRORS.get(rc, f'error {rc}')}")
        return out
