"""Mixtral: Mistral's attention with a sparse MoE MLP in every layer (softmax routing over
`num_local_experts`, top `num_experts_per_tok`, always renormalized).

The checkpoint names the MoE block `block_sparse_moe` and an expert's projections w1 (gate),
w3 (up), w2 (down); the model keeps the uniform names (`mlp`, gate_proj/up_proj/down_proj)
and `checkpoint_name` maps one to the other.
"""

from __future__ import annotations

import re

from torch import nn

from tandem.layers.moe import SparseMoE
from tandem.models.arch import ModelArch
from tandem.models.llama import DecoderForCausalLM

# checkpoint name part -> model name part, and back
_TO_MODEL = {".block_sparse_moe.": ".mlp.", ".w1.": ".gate_proj.", ".w3.": ".up_proj.", ".w2.": ".down_proj."}
_TO_CHECKPOINT = {v: k for k, v in _TO_MODEL.items()}
_PATTERN = re.compile("|".join(re.escape(k) for k in _TO_MODEL))
_BACK = re.compile("|".join(re.escape(k) for k in _TO_CHECKPOINT))


class MixtralForCausalLM(DecoderForCausalLM):
    @classmethod
    def feed_forward(cls, arch: ModelArch, layer_idx: int) -> nn.Module:
        assert arch.moe is not None, "a Mixtral config always has experts"
        return SparseMoE(arch.hidden_size, arch.moe)

    @classmethod
    def checkpoint_name(cls, name: str, arch: ModelArch) -> str | None:
        return _PATTERN.sub(lambda m: _TO_MODEL[m.group(0)], name)

    @classmethod
    def saved_name(cls, name: str) -> str:
        """The checkpoint's name of model parameter `name` (the inverse of checkpoint_name)."""
        return _BACK.sub(lambda m: _TO_CHECKPOINT[m.group(0)], name)
