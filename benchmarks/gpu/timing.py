"""Median wall time of a GPU (or CPU) call, synchronised around each repetition."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
