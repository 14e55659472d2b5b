"""config.json in every spelling transformers writes: tandem's alias tables equal the installed
transformers' `attribute_map`s, configs saved by the pinned transformers parse to the same
ModelArch as the published ones, and configs as the newest transformers writes them load."""

from __future__ import annotations

import json

import pytest
import transformers
from transformers import CONFIG_MAPPING

from tandem.errors import ModelLoadError
from tandem.models.arch import ModelArch
from tandem.models.config_aliases import ATTRIBUTE_MAPS, canonical_config
from tandem.models.registry import supported_architectures
from tests.models.real_configs import DEEPSEEK_V3, KIMI_K2, MIXTRAL_8X7B, QWEN3_30B_A3B
from tests.models.test_arch import BASE, LLAMA3

_DENSE = {**BASE, "bos_token_id": 128000, "rope_theta": 500000.0, "torch_dtype": "bfloat16"}
# published configs (transformers 4 spellings) of each supported model_type
PUBLISHED = {
    "llama": {**_DENSE, "rope_scaling": LLAMA3},
    "mistral": {**_DENSE, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": None},
    "qwen2": {**_DENSE, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "sliding_window": 4096,
              "use_sliding_window": False},
    "qwen3": {**_DENSE, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 128},
    "mixtral": MIXTRAL_8X7B,
    "qwen3_moe": QWEN3_30B_A3B,
    "deepseek_v3": DEEPSEEK_V3,
}

# Qwen3-30B-A3B's config.json as transformers 5.24 saves it (`num_local_experts`, no `num_experts`)
QWEN3_MOE_V5 = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "transformers_version": "5.24.0",
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "hidden_act": "silu",
    "max_position_embeddings": 40960, "initializer_range": 0.02, "rms_norm_eps": 1e-06, "use_cache": True,
    "tie_word_embeddings": False, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "attention_bias": False, "use_sliding_window": False, "sliding_window": None, "attention_dropout": 0.0,
    "decoder_sparse_step": 1, "moe_intermediate_size": 768, "num_experts_per_tok": 8, "num_local_experts": 128,
    "norm_topk_prob": True, "output_router_logits": False, "router_aux_loss_coef": 0.001, "mlp_only_layers": [],
    "pad_token_id": None, "bos_token_id": 151643, "eos_token_id": 151645, "dtype": "bfloat16",
}


def test_alias_tables_equal_the_installed_transformers():
    model_types = {getattr(transformers, arch).config_class.model_type for arch in supported_architectures()}
    assert model_types <= set(ATTRIBUTE_MAPS)
    for model_type in model_types:
        assert ATTRIBUTE_MAPS[model_type] == CONFIG_MAPPING[model_type].attribute_map, model_type
    # Kimi K2 runs DeepSeek-V3's code under its own model_type (no transformers class)
    assert ATTRIBUTE_MAPS["kimi_k2"] == ATTRIBUTE_MAPS["deepseek_v3"]


@pytest.mark.parametrize("model_type", sorted(PUBLISHED))
def test_config_saved_by_the_pinned_transformers_parses_as_published(model_type, tmp_path):
    published = PUBLISHED[model_type]
    CONFIG_MAPPING[model_type](**{k: v for k, v in published.items() if k != "model_type"}).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["transformers_version"] == transformers.__version__
    assert ModelArch.from_dir(tmp_path) == ModelArch.from_config(published)


def test_qwen3_moe_as_the_newest_transformers_writes_it():
    arch = ModelArch.from_config(QWEN3_MOE_V5)
    assert arch == ModelArch.from_config(QWEN3_30B_A3B)
    assert (arch.moe.num_experts, arch.moe.top_k, arch.moe.normalize) == (128, 8, True)


@pytest.mark.parametrize("cfg, alias, stored", [
    (MIXTRAL_8X7B, "num_experts", "num_local_experts"),
    (DEEPSEEK_V3, "num_local_experts", "n_routed_experts"),
    (KIMI_K2, "num_local_experts", "n_routed_experts"),
])
def test_each_alias_reads_as_the_stored_name(cfg, alias, stored):
    renamed = {**{k: v for k, v in cfg.items() if k != stored}, alias: cfg[stored]}
    assert ModelArch.from_config(renamed) == ModelArch.from_config(cfg)


def test_two_spellings_must_agree():
    same = {**QWEN3_MOE_V5, "num_experts": 128}
    assert canonical_config(same)["num_local_experts"] == 128 and "num_experts" not in canonical_config(same)
    with pytest.raises(ModelLoadError, match="num_experts=64 and num_local_experts=128"):
        ModelArch.from_config({**QWEN3_MOE_V5, "num_experts": 64})
