"""Where this process's Triton kernels can run, decided once: `triton.jit` compiles a kernel for
the GPU, or wraps it for Triton's interpreter (numpy on the CPU) when TRITON_INTERPRET=1 was set
before the kernels' modules were imported. The choice is triton's, read from its settings here.
Also the one matrix product every kernel uses (`dot`, with `dot_args`)."""

from __future__ import annotations

import logging

import torch
import triton
import triton.language as tl

log = logging.getLogger(__name__)

# True: every kernel of tandem.kernels.triton runs in Triton's interpreter (CPU tensors, slow; tests)
INTERPRETED = bool(triton.knobs.runtime.interpret)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CACHE_DTYPES = (*DTYPES, torch.float8_e5m2)   # K/V widened to the query's type as they are read


def unusable_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the Triton kernels cannot run for a model in `dtype` on `device`; None when they can."""
    if dtype not in DTYPES:
        return f"the Triton kernels take {', '.join(map(str, DTYPES))}, not {dtype}"
    if INTERPRETED:
        if device.type == "cpu":
            return None
        return f"Triton's interpreter (TRITON_INTERPRET=1) runs on the CPU, not {device}"
    if device.type != "cuda":
        return (f"the Triton kernels run on CUDA devices (or, for tests, on the CPU with "
                f"TRITON_INTERPRET=1), not {device}")
    major, _ = torch.cuda.get_device_capability(device)
    if dtype == torch.bfloat16 and major < 8:
        return f"bfloat16 Triton kernels need compute capability 8.0 or newer; this GPU has {major}.x"
    return None


def unsupported(q: torch.Tensor, kv_cache: torch.Tensor) -> str | None:
    """Why these kernels cannot take this query and cache; None when they can."""
    if q.dtype not in DTYPES or kv_cache.dtype not in CACHE_DTYPES:
        return f"query {q.dtype} / cache {kv_cache.dtype}: the Triton attention takes {DTYPES} over {CACHE_DTYPES}"
    if q.device != kv_cache.device:
        return f"query on {q.device}, cache on {kv_cache.device}"
    if kv_cache.stride(-1) != 1 or q.stride(-1) != 1:
        return "the cache's and the query's last dimension must be contiguous"
    return None


class CheckedKernel:
    """supports(): the reason a call cannot run is logged once per kernel object, then the layer
    takes its torch path. The kernels read every step-dependent value on the device: graph-safe."""

    graph_safe = True

    def __init__(self) -> None:
        self._warned = False

    def supports(self, q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
        reason = unsupported(q, kv_cache)
        if reason is not None and not self._warned:
            self._warned = True
            log.warning("%s: falling back to torch SDPA: %s", type(self).__name__, reason)
        return reason is None


def dot_args(dtype: torch.dtype) -> dict:
    """`dot`'s constexpr arguments for operands of `dtype`: float32 multiplied as float32 ("ieee"),
    not TF32, so that the kernels agree with torch's float32 paths; under the interpreter,
    bfloat16 operands widened to float32 first (triton 3.9's interpreter multiplies bfloat16 bit
    patterns as integers: np.matmul over their uint16 storage)."""
    widen = INTERPRETED and dtype == torch.bfloat16
    return {"PRECISION": "ieee" if dtype == torch.float32 or widen else "tf32", "WIDEN": widen}


@triton.jit
def dot(a, b, PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    # a [M, K], b [K, N] -> [M, N] float32 (M, N, K >= 16 on the GPU)
    if WIDEN:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision=PRECISION)
