"""RoPE settings as plain data (no torch: the gateway reads model configs without it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RopeSpec:
    """A model's RoPE settings, parsed from its config.json by models/arch.py."""

    theta: float = 10000.0
    rope_type: str = "default"      # default | linear | llama3 | yarn
    factor: float = 1.0             # linear, llama3, yarn
    low_freq_factor: float = 1.0    # llama3
    high_freq_factor: float = 4.0   # llama3
    original_max_position_embeddings: int | None = None  # llama3, yarn
    # yarn: the ramp between kept and interpolated frequencies, and the cos/sin scale
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None   # None: derived from factor (and mscale)
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
