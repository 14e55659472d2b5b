"""Whether a loaded model runs its element-wise layers through the fused CPU kernels
(ModelConfig.fused_layers): policy, kept apart from the kernels (tandem.kernels.fused_ops) and
the layers that call them."""

from __future__ import annotations

import logging

import torch

from tandem.kernels.build import KernelBuildConfig, KernelBuildError
from tandem.kernels.fused_ops import FusedOps

log = logging.getLogger(__name__)


def fused_ops(enabled: bool, dtype: torch.dtype, device: torch.device,
              build: KernelBuildConfig = KernelBuildConfig()) -> FusedOps | None:
    """The fused kernels for a CPU model in float32 or bfloat16 when enabled; None (torch ops)
    otherwise, or when they cannot be compiled here (logged)."""
    if not enabled or device.type != "cpu" or dtype not in FusedOps.DTYPES:
        return None
    try:
        ops = FusedOps.load(build)
    except (KernelBuildError, OSError) as e:
        log.warning("fused CPU layers unavailable, using torch ops: %s", e)
        return None
    log.info("RMSNorm, SiLU-mul and rotary: fused CPU kernels")
    return ops
