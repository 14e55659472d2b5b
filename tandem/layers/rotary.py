"""Rotary position embedding (RoPE), half-split layout, with default / linear / llama3 / yarn scaling.

cos/sin are computed once per step from the step's positions and shared by all layers.
"""

from __future__ import annotations

import math

import torch

from tandem.layers.rope_spec import RopeSpec


def inv_frequencies(head_dim: int, rope: RopeSpec, max_position_embeddings: int) -> torch.Tensor:
    """FloatTensor[head_dim // 2] of angular frequencies after scaling (on the CPU, even under a
    meta default device)."""
    inv = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim))
    if rope.rope_type == "linear":
        return inv / rope.factor
    if rope.rope_type == "llama3":
        old_len = rope.original_max_position_embeddings or max_position_embeddings
        low_wavelen = old_len / rope.low_freq_factor
        high_wavelen = old_len / rope.high_freq_factor
        wavelen = 2 * math.pi / inv
        # long wavelengths are divided by factor, short ones kept, the middle band interpolated
        scaled = torch.where(wavelen > low_wavelen, inv / rope.factor, inv)
        smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, smoothed, scaled)
    if rope.rope_type == "yarn":
        return _yarn_frequencies(inv, head_dim, rope, max_position_embeddings)
    return inv


def _yarn_frequencies(inv: torch.Tensor, head_dim: int, rope: RopeSpec,
                      max_position_embeddings: int) -> torch.Tensor:
    """YaRN: dimensions that turn fewer than beta_slow times over the original context are
    interpolated (divided by factor), those turning more than beta_fast times kept, a linear
    ramp between."""
    old_len = rope.original_max_position_embeddings or max_position_embeddings

    def dim_turning(turns: float) -> float:  # the dimension that turns `turns` times over old_len
        return head_dim * math.log(old_len / (turns * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = dim_turning(rope.beta_fast), dim_turning(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (keep), 0: interpolate
    return inv / rope.factor * (1 - keep) + inv * keep


def attention_scale(rope: RopeSpec) -> float:
    """The factor cos and sin are multiplied by (YaRN's attention temperature; 1 otherwise)."""
    if rope.rope_type != "yarn":
        return 1.0
    if rope.attention_factor is not None:
        return rope.attention_factor

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if rope.mscale and rope.mscale_all_dim:
        return mscale(rope.factor, rope.mscale) / mscale(rope.factor, rope.mscale_all_dim)
    return mscale(rope.factor)


class RotaryEmbedding:
    """Holds the frequencies; `cos_sin(positions)` gives the step's tables."""

    def __init__(self, head_dim: int, rope: RopeSpec, max_position_embeddings: int,
                 device: torch.device | str) -> None:
        self.inv_freq = inv_frequencies(head_dim, rope, max_position_embeddings).to(device)  # [D/2]
        self.scale = attention_scale(rope)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        # positions LongTensor[T] -> cos, sin [T, 1, D/2] in `dtype` (broadcast over heads)
        freqs = positions.float().unsqueeze(1) * self.inv_freq.unsqueeze(0)  # [T, D/2] float32
        cos, sin = freqs.cos(), freqs.sin()
        if self.scale != 1.0:
            cos, sin = cos * self.scale, sin * self.scale
        return cos.to(dtype).unsqueeze(1), sin.to(dtype).unsqueeze(1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [T, heads, D]; cos/sin [T, 1, D/2]. Same rounding as x*cos + rotate_half(x)*sin.
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def apply_rotary_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [T, heads, D] whose rotated pairs are interleaved (x0, x1), (x2, x3), ... (DeepSeek's
    # weights); cos/sin [T, 1, D/2]. Output in the half-split layout (evens' rotation, then odds'):
    # the same layout for queries and keys, so their dot products are those of the interleaved form.
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
