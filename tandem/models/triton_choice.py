"""Whether a loaded model can run the Triton kernels (--attention triton, --moe-kernel triton):
policy, apart from the kernels (tandem.kernels.triton). A choice that cannot run here falls back
with one warning naming the reason, never an error: the CLI refuses the plain mistake (the CPU
without Triton's interpreter) before loading.

The kernels' modules are imported only here and only when chosen: importing them imports triton
(~0.4 s) and fixes, at that moment, whether they compile for the GPU or run interpreted."""

from __future__ import annotations

import importlib.util
import logging

import torch

from tandem.errors import ModelLoadError
from tandem.layers.attention import AttentionWorkspace
from tandem.layers.moe import MoEKernel

MOE_KERNELS = ("loop", "triton")   # ModelConfig.moe_kernel
log = logging.getLogger(__name__)


def triton_unusable(dtype: torch.dtype, device: torch.device) -> str | None:
    """Why the Triton kernels cannot run a model in `dtype` on `device`; None when they can."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    from tandem.kernels.triton.runtime import unusable_reason
    return unusable_reason(device, dtype)


def triton_attention(dtype: torch.dtype, device: torch.device) -> AttentionWorkspace | None:
    """A workspace with the Triton decode, prefill and MLA kernels, or None (logged)."""
    reason = triton_unusable(dtype, device)
    if reason is not None:
        log.warning("attention 'triton' unavailable, using 'auto': %s", reason)
        return None
    from tandem.kernels.triton.paged_attention import TritonPagedDecode, TritonPagedPrefill
    from tandem.kernels.triton.paged_mla import TritonMLA
    log.info("attention: Triton kernels (decode, prefill, MLA) on %s", device)
    return AttentionWorkspace(TritonPagedDecode(), TritonPagedPrefill(), TritonMLA())


def triton_moe(dtype: torch.dtype, device: torch.device) -> MoEKernel | None:
    """The Triton grouped-GEMM MoE kernel, or None (logged: the loop over experts stays)."""
    reason = triton_unusable(dtype, device)
    if reason is not None:
        log.warning("MoE kernel 'triton' unavailable, looping over experts: %s", reason)
        return None
    from tandem.kernels.triton.fused_moe import TritonFusedMoE
    log.info("MoE: Triton grouped expert GEMMs on %s", device)
    return TritonFusedMoE()


def moe_kernel(choice: str, dtype: torch.dtype, device: torch.device) -> MoEKernel | None:
    """The kernel of the model's MoE layers for `choice` (ModelConfig.moe_kernel); None: the loop."""
    if choice not in MOE_KERNELS:
        raise ModelLoadError(f"moe_kernel must be one of {', '.join(MOE_KERNELS)}, got {choice!r}")
    return triton_moe(dtype, device) if choice == "triton" else None
