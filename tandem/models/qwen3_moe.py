"""Qwen3-MoE: Qwen3's attention (an RMSNorm on each query and key head) with a sparse MoE MLP
(softmax routing, renormalized when `norm_topk_prob`) in every layer but the dense ones."""

from __future__ import annotations

from torch import nn

from tandem.layers.mlp import GatedMLP
from tandem.layers.moe import SparseMoE
from tandem.models.arch import ModelArch
from tandem.models.qwen3 import Qwen3ForCausalLM


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    @classmethod
    def feed_forward(cls, arch: ModelArch, layer_idx: int) -> nn.Module:
        if arch.moe is None or not arch.moe.is_moe_layer(layer_idx):
            return GatedMLP(arch.hidden_size, arch.intermediate_size)
        return SparseMoE(arch.hidden_size, arch.moe)
