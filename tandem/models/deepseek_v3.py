"""DeepSeek-V3 (and Kimi K2, which uses it): multi-head latent attention, sigmoid-routed experts
with grouped top-k and shared experts, dense MLPs in the first `first_k_dense_replace` layers.

Parameter names are the checkpoints' (`self_attn.q_a_proj`, `kv_a_proj_with_mqa`, `kv_b_proj`,
`mlp.gate.e_score_correction_bias`, `mlp.experts.<e>.gate_proj`, `mlp.shared_experts...`).
The checkpoint's multi-token-prediction layers (indices >= num_hidden_layers) are not loaded.
Attention is computed over a latent cache (tandem/layers/mla_attention.py).
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from tandem.layers.attention import AttentionWorkspace
from tandem.layers.attention_batch import AttentionBatch
from tandem.layers.linear import Linear
from tandem.layers.mla_attention import mla_paged_attention
from tandem.layers.mlp import GatedMLP
from tandem.layers.moe import SparseMoE
from tandem.layers.norm import RMSNorm
from tandem.layers.rotary import apply_rotary, apply_rotary_interleaved
from tandem.models.arch import ModelArch
from tandem.models.llama import DecoderForCausalLM, DecoderOptions

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


class LatentUpProjection(nn.Module):
    """kv_b_proj: latent [r] -> per head (k_nope [dn], v [dv]). A plain weight, never packed:
    decode reads its two halves as W_UK and W_UV (absorbed attention)."""

    def __init__(self, rank: int, out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out, rank), requires_grad=False)   # [H * (dn + dv), r]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


def softmax_scale(arch: ModelArch) -> float:
    """qk_head_dim^-0.5, times YaRN's mscale(factor, mscale_all_dim)^2 (as DeepSeek and transformers)."""
    assert arch.mla is not None
    scale = arch.mla.qk_head_dim ** -0.5
    rope = arch.rope
    if rope.rope_type == "yarn" and rope.mscale_all_dim and rope.factor > 1:
        m = 0.1 * rope.mscale_all_dim * math.log(rope.factor) + 1.0
        scale *= m * m
    return scale


class MLAttention(nn.Module):
    def __init__(self, arch: ModelArch, layer_idx: int, num_heads: int | None = None) -> None:
        """`num_heads`: the heads this rank computes (tensor parallel); default all."""
        super().__init__()
        mla = arch.mla
        assert mla is not None
        self.layer_idx = layer_idx
        self.num_heads = num_heads or arch.num_heads
        self.mla = mla
        self.scale = softmax_scale(arch)
        h, H, bias = arch.hidden_size, self.num_heads, arch.attention_bias
        if mla.q_lora_rank is None:
            self.q_proj = Linear(h, H * mla.qk_head_dim, bias=False)
        else:
            self.q_a_proj = Linear(h, mla.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, 1e-6)   # eps fixed, as transformers
            self.q_b_proj = Linear(mla.q_lora_rank, H * mla.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = Linear(h, mla.latent_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, 1e-6)
        self.kv_b_proj = LatentUpProjection(mla.kv_lora_rank, H * (mla.qk_nope_head_dim + mla.v_head_dim))
        self.o_proj = Linear(H * mla.v_head_dim, h, bias=bias)
        self.rotary = apply_rotary_interleaved if mla.rope_interleave else apply_rotary

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: AttentionBatch,
                kv_cache: torch.Tensor, ws: AttentionWorkspace) -> torch.Tensor:
        # x [T, hidden] -> [T, hidden]; cos/sin [T, 1, dr/2]
        T, H, m = x.shape[0], self.num_heads, self.mla
        if m.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_rot = q.view(T, H, m.qk_head_dim).split([m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)
        c, k_rot = self.kv_a_proj_with_mqa(x).split([m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
        c = self.kv_a_layernorm(c.contiguous())                                  # [T, r]
        q_rot = self.rotary(q_rot, cos, sin)                                     # [T, H, dr]
        k_rot = self.rotary(k_rot.unsqueeze(1), cos, sin)[:, 0]                  # [T, dr]
        latent = torch.cat((c, k_rot), dim=-1)                                   # [T, r + dr]
        o = mla_paged_attention(q_nope, q_rot, latent, kv_cache, self.layer_idx, batch, self.scale,
                                self.kv_b_proj.weight, m.v_head_dim, ws)        # [T, H, dv]
        return self.o_proj(o.reshape(T, H * m.v_head_dim))


class DeepseekV3ForCausalLM(DecoderForCausalLM):
    float32_params = ("e_score_correction_bias",)

    @classmethod
    def attention(cls, arch: ModelArch, opts: DecoderOptions, layer_idx: int) -> nn.Module:
        return MLAttention(arch, layer_idx)

    @classmethod
    def feed_forward(cls, arch: ModelArch, layer_idx: int) -> nn.Module:
        if arch.moe is None or not arch.moe.is_moe_layer(layer_idx):
            return GatedMLP(arch.hidden_size, arch.intermediate_size)
        return SparseMoE(arch.hidden_size, arch.moe)

    @classmethod
    def checkpoint_name(cls, name: str, arch: ModelArch) -> str | None:
        m = _LAYER.match(name)
        if m and int(m.group(1)) >= arch.num_layers:
            return None     # a multi-token-prediction layer
        return name
