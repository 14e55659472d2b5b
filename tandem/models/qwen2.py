"""Qwen2: the Llama decoder with a bias on q/k/v (none on the output projection)."""

from __future__ import annotations

from tandem.models.arch import ModelArch
from tandem.models.llama import DecoderForCausalLM, DecoderOptions


class Qwen2ForCausalLM(DecoderForCausalLM):
    @classmethod
    def options(cls, arch: ModelArch) -> DecoderOptions:
        return DecoderOptions(qkv_bias=True, o_bias=False)
