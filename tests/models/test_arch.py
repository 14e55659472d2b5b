"""ModelArch parsing of both config.json styles (transformers 4 and 5)."""

from __future__ import annotations

import pytest

from tandem.errors import ModelLoadError
from tandem.models.arch import ModelArch

BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5, "eos_token_id": [128001, 128008, 128009]}
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def test_legacy_llama31_config():
    arch = ModelArch.from_config({**BASE, "rope_theta": 500000.0, "rope_scaling": LLAMA3,
                                  "torch_dtype": "bfloat16"})
    assert (arch.head_dim, arch.num_kv_heads, arch.torch_dtype) == (128, 8, "bfloat16")
    assert arch.rope.theta == 500000.0 and arch.rope.rope_type == "llama3" and arch.rope.factor == 8.0
    assert arch.rope.original_max_position_embeddings == 8192
    assert arch.eos_token_ids == (128001, 128008, 128009)


def test_v5_rope_parameters_and_dtype():
    arch = ModelArch.from_config({**BASE, "rope_parameters": {"rope_theta": 500000.0, **LLAMA3}, "dtype": "float32"})
    assert arch.rope.theta == 500000.0 and arch.rope.rope_type == "llama3" and arch.torch_dtype == "float32"


def test_per_layer_type_rope_parameters():
    arch = ModelArch.from_config({**BASE, "rope_parameters": {"full_attention": {"rope_theta": 1e6,
                                                                                 "rope_type": "default"}}})
    assert arch.rope.theta == 1e6 and arch.rope.rope_type == "default"


def test_legacy_type_key_and_defaults():
    arch = ModelArch.from_config({**BASE, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert arch.rope.rope_type == "linear" and arch.rope.theta == 10000.0


def test_qwen_families():
    qwen2 = ModelArch.from_config({**BASE, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                                   "sliding_window": 4096, "use_sliding_window": False})
    assert qwen2.attention_bias and qwen2.sliding_window is None
    qwen3 = ModelArch.from_config({**BASE, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                   "head_dim": 256, "attention_bias": False})
    assert qwen3.head_dim == 256 and not qwen3.attention_bias


def test_yarn_legacy_config_and_factor_from_the_context_ratio():
    arch = ModelArch.from_config({**BASE, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                           "original_max_position_embeddings": 32768}})
    r = arch.rope
    assert (r.rope_type, r.factor, r.original_max_position_embeddings) == ("yarn", 4.0, 32768)
    assert (r.beta_fast, r.beta_slow, r.attention_factor, r.truncate) == (32.0, 1.0, None, True)
    # no factor: max_position_embeddings over the original context, as transformers derives it
    derived = ModelArch.from_config({**BASE, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 1e6, "original_max_position_embeddings": 32768,
        "mscale": 1.0, "mscale_all_dim": 1.0}}).rope
    assert derived.factor == 4.0 and derived.mscale == derived.mscale_all_dim == 1.0


def test_bad_configs():
    with pytest.raises(ModelLoadError, match="'architectures'"):
        ModelArch.from_config({k: v for k, v in BASE.items() if k != "architectures"})
    with pytest.raises(ModelLoadError, match="'intermediate_size'"):
        ModelArch.from_config({k: v for k, v in BASE.items() if k != "intermediate_size"})
    with pytest.raises(ModelLoadError, match="not a multiple"):
        ModelArch.from_config({**BASE, "num_key_value_heads": 5})
