"""Which decode attention a loaded model runs (ModelConfig.attention): policy, kept apart from
the kernels themselves (tandem.kernels) and the attention layer that calls them."""

from __future__ import annotations

import logging
import time

import torch

from tandem.errors import ModelLoadError
from tandem.kernels.build import KernelBuildConfig, KernelBuildError
from tandem.kernels.paged_decode import PagedDecodeKernel

CHOICES = ("auto", "native", "sdpa")
log = logging.getLogger(__name__)


def decode_kernel(choice: str, dtype: torch.dtype, device: torch.device,
                  build: KernelBuildConfig = KernelBuildConfig()) -> PagedDecodeKernel | None:
    """The native decode kernel to use, or None for torch SDPA. "native" where the kernel cannot
    run (another device or dtype, no compiler) is a ModelLoadError; "auto" falls back, logged."""
    if choice not in CHOICES:
        raise ModelLoadError(f"attention must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "sdpa":
        return None
    usable = device.type == "cpu" and dtype in PagedDecodeKernel.DTYPES
    if not usable:
        if choice == "native":
            raise ModelLoadError(f"attention 'native' is a CPU kernel for "
                                 f"{', '.join(str(d) for d in PagedDecodeKernel.DTYPES)}; this model "
                                 f"runs in {dtype} on {device} (use 'auto' or 'sdpa')")
        return None
    start = time.perf_counter()
    try:
        kernel = PagedDecodeKernel.load(build)
    except (KernelBuildError, OSError) as e:
        if choice == "native":
            raise ModelLoadError(f"attention 'native': the CPU kernel could not be built: {e}") from e
        log.warning("native decode attention unavailable, using torch SDPA: %s", e)
        return None
    log.info("decode attention: native CPU kernel (ready in %.2f s)", time.perf_counter() - start)
    return kernel
