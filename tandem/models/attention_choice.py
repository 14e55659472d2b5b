"""Which attention kernels a loaded model runs (ModelConfig.attention): policy, kept apart from
the kernels themselves (tandem.kernels) and the attention layer that calls them.

"native" asks for the CPU decode kernel (an error where it cannot run) and takes the AMX prefill
kernel where this CPU has AMX tiles (bfloat16 only; otherwise prefill stays on torch SDPA).
"auto" takes what can run and falls back to torch SDPA, logged. "sdpa": torch SDPA only.
"triton": the Triton kernels for decode, prefill and MLA (tandem/models/triton_choice.py), where
they can run; elsewhere as "auto", with one warning naming the reason."""

from __future__ import annotations

import logging
import time

import torch

from tandem.errors import ModelLoadError
from tandem.kernels.build import KernelBuildConfig, KernelBuildError
from tandem.kernels.paged_decode import PagedDecodeKernel
from tandem.kernels.paged_prefill import PagedPrefillKernel
from tandem.layers.attention import AttentionWorkspace
from tandem.models.triton_choice import triton_attention

CHOICES = ("auto", "native", "sdpa", "triton")
_NATIVE_CHOICES = ("auto", "native", "sdpa")   # what decode_kernel and prefill_kernel take
log = logging.getLogger(__name__)


def attention_workspace(choice: str, dtype: torch.dtype, device: torch.device,
                        build: KernelBuildConfig = KernelBuildConfig()) -> AttentionWorkspace:
    """The workspace carrying the kernels `choice` asks for (ModelConfig.attention)."""
    if choice not in CHOICES:
        raise ModelLoadError(f"attention must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "triton":
        ws = triton_attention(dtype, device)
        if ws is not None:
            return ws
        choice = "auto"
    return AttentionWorkspace(decode_kernel(choice, dtype, device, build),
                              prefill_kernel(choice, dtype, device, build))


def decode_kernel(choice: str, dtype: torch.dtype, device: torch.device,
                  build: KernelBuildConfig = KernelBuildConfig()) -> PagedDecodeKernel | None:
    """The native decode kernel to use, or None for torch SDPA. "native" where the kernel cannot
    run (another device or dtype, no compiler) is a ModelLoadError; "auto" falls back, logged."""
    if choice not in _NATIVE_CHOICES:
        raise ModelLoadError(f"attention must be one of {', '.join(_NATIVE_CHOICES)}, got {choice!r}")
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


def prefill_kernel(choice: str, dtype: torch.dtype, device: torch.device,
                   build: KernelBuildConfig = KernelBuildConfig()) -> PagedPrefillKernel | None:
    """The native prefill kernel (AMX tiles, else AVX-512 BF16) for "auto" and "native" on a
    CPU with either and a bfloat16 model, else None (torch SDPA). Never an error: prefill has no native path to insist on
    elsewhere (decode_kernel validates the choice)."""
    if choice == "sdpa" or device.type != "cpu" or dtype != PagedPrefillKernel.DTYPE:
        return None
    try:
        kernel = PagedPrefillKernel.load(build)
    except (KernelBuildError, OSError) as e:
        log.warning("native prefill attention unavailable, using torch SDPA: %s", e)
        return None
    log.info("prefill attention: %s", f"native CPU kernel ({kernel.backend})" if kernel
             else "torch SDPA (no AMX or AVX-512 BF16 here)")
    return kernel
