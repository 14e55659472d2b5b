"""Architecture name (config.json "architectures"[0]) -> model class."""

from __future__ import annotations

from tandem.errors import ModelLoadError
from tandem.models.deepseek_v3 import DeepseekV3ForCausalLM
from tandem.models.llama import DecoderForCausalLM, LlamaForCausalLM, MistralForCausalLM
from tandem.models.mixtral import MixtralForCausalLM
from tandem.models.qwen2 import Qwen2ForCausalLM
from tandem.models.qwen3 import Qwen3ForCausalLM
from tandem.models.qwen3_moe import Qwen3MoeForCausalLM

MODEL_CLASSES: dict[str, type[DecoderForCausalLM]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": MistralForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "MixtralForCausalLM": MixtralForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
    "DeepseekV3ForCausalLM": DeepseekV3ForCausalLM,
}


def supported_architectures() -> tuple[str, ...]:
    return tuple(MODEL_CLASSES)


def model_class(architecture: str) -> type[DecoderForCausalLM]:
    try:
        return MODEL_CLASSES[architecture]
    except KeyError:
        raise ModelLoadError(f"unsupported architecture {architecture!r}; supported: "
                             + ", ".join(MODEL_CLASSES)) from None
