"""The machine's own limits, measured: device-to-device copy bandwidth (bytes read plus bytes
written per second: what reading weights and KV at best costs) and dense matmul FLOP/s in the
benchmark's dtype. Every bound of bounds.py is a fraction of these, not of a datasheet."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from benchmarks.gpu.timing import median_seconds


@dataclass(frozen=True)
class Limits:
    copy_bytes_per_s: float   # 2 * size / time of dst.copy_(src)
    matmul_flops: float       # 2 * n^3 / time of an n x n x n matmul
    copy_bytes: int           # the sizes measured at
    matmul_n: int

    def to_dict(self) -> dict:
        return asdict(self)


def measure(device: torch.device, dtype: torch.dtype, smoke: bool) -> Limits:
    copy_bytes = 2**22 if smoke else 2**30          # 4 MiB / 1 GiB
    n = 256 if smoke else 8192
    src = torch.empty(copy_bytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    copy_s = median_seconds(lambda: dst.copy_(src), device, reps=3 if smoke else 20, warmup=1 if smoke else 3)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    mm_s = median_seconds(lambda: a @ b, device, reps=3 if smoke else 20, warmup=1 if smoke else 3)
    return Limits(copy_bytes_per_s=2 * copy_bytes / copy_s, matmul_flops=2 * n**3 / mm_s,
                  copy_bytes=copy_bytes, matmul_n=n)
