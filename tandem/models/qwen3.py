"""Qwen3: the Llama decoder with an RMSNorm on every query and key head (before RoPE)."""

from __future__ import annotations

from tandem.models.arch import ModelArch
from tandem.models.llama import DecoderForCausalLM, DecoderOptions


class Qwen3ForCausalLM(DecoderForCausalLM):
    @classmethod
    def options(cls, arch: ModelArch) -> DecoderOptions:
        return DecoderOptions(qkv_bias=arch.attention_bias, o_bias=arch.attention_bias, qk_norm=True)
