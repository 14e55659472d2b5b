"""MLASpec: the shapes of multi-head latent attention (DeepSeek-V2/V3, Kimi K2).

Per token and layer the cache holds `latent_dim` values: the normalized KV latent
(kv_lora_rank) followed by the RoPE key (qk_rope_head_dim) that all heads share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MLASpec:
    q_lora_rank: int | None     # None: q_proj straight from the hidden state
    kv_lora_rank: int           # the latent each token caches
    qk_nope_head_dim: int       # per head: query/key dims without position
    qk_rope_head_dim: int       # per head: query dims with RoPE; the key's RoPE part is shared by all heads
    v_head_dim: int
    rope_interleave: bool = True  # RoPE over interleaved pairs (DeepSeek's weights) rather than halves

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Cached values per token and layer: the latent, then the RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim
