"""Memory estimates from config.json alone: parameter counts equal the built models', the real
checkpoints' published sizes come out, and a model that cannot fit is a clear error before any
weight is read."""

from __future__ import annotations

import json

import pytest
import torch

from tandem.config import ModelConfig
from tandem.errors import ModelLoadError
from tandem.models.arch import ModelArch
from tandem.models.loader import load_model
from tandem.models.memory import check_fits, count_parameters, estimate_memory, kv_bytes_per_token
from tandem.models.registry import model_class
from tandem.testing.tiny_model import write_test_model
from tests.models.real_configs import REAL

torch.set_num_threads(1)

TINY = [("LlamaForCausalLM", {}), ("Qwen2ForCausalLM", {}), ("Qwen3ForCausalLM", {}),
        ("MixtralForCausalLM", {}), ("Qwen3MoeForCausalLM", {"extra_config": {"mlp_only_layers": [1]}}),
        ("DeepseekV3ForCausalLM", {"num_layers": 3}),
        ("DeepseekV3ForCausalLM", {"extra_config": {"q_lora_rank": None, "attention_bias": True}}),
        ("LlamaForCausalLM", {"tie_word_embeddings": True})]


@pytest.mark.parametrize("arch_name,kw", TINY, ids=[f"{a}-{i}" for i, (a, _) in enumerate(TINY)])
def test_parameter_count_equals_the_built_model(tmp_path, arch_name, kw):
    arch = ModelArch.from_dir(write_test_model(tmp_path, arch_name, **kw))
    with torch.device("meta"):
        model = model_class(arch.architecture)(arch)
    built = sum(p.numel() for n, p in model.named_parameters()
                if not (arch.tie_word_embeddings and n == "lm_head.weight"))  # tied by the loader
    assert count_parameters(arch)[0] == built


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_configs_give_their_published_sizes(name):
    cfg, total_b, active_b = REAL[name]
    arch = ModelArch.from_config(cfg)
    total, active = count_parameters(arch)
    assert total / 1e9 == pytest.approx(total_b, rel=0.02)
    assert active / 1e9 == pytest.approx(active_b, rel=0.06)
    est = estimate_memory(arch, torch.bfloat16)
    assert est.weight_bytes == 2 * total
    assert f"{total / 1e9:.2f}B parameters" in est.describe()


def test_mla_caches_far_fewer_bytes_per_token_than_its_dense_equivalent():
    arch = ModelArch.from_config(REAL["deepseek-v3"][0])
    mla = kv_bytes_per_token(arch, torch.bfloat16)
    assert mla == 61 * (512 + 64) * 2                              # 70,272 bytes
    # the same attention with keys and values per head: 128 heads x (192 + 128) dims
    dense = 61 * 128 * (192 + 128) * 2
    assert dense / mla > 70


def test_check_fits_names_the_estimate_and_the_ranks_it_would_take():
    est = estimate_memory(ModelArch.from_config(REAL["mixtral-8x7b"][0]), torch.bfloat16)
    with pytest.raises(ModelLoadError) as e:
        check_fits(est, torch.device("cpu"), available=24 * 2**30)
    msg = str(e.value)
    assert "46.70B parameters" in msg and "87.0 GiB" in msg and "24.0 GiB" in msg
    assert "at least 4 devices" in msg and "--tensor-parallel-size" in msg
    check_fits(estimate_memory(est_arch := ModelArch.from_config(REAL["mixtral-8x7b"][0]), torch.bfloat16,
                               num_ranks=4), torch.device("cpu"), available=24 * 2**30)
    assert est_arch.moe is not None


@pytest.mark.parametrize("name", ["deepseek-v3", "kimi-k2"])
def test_loading_a_full_size_config_is_a_clear_error_not_a_crash(tmp_path, name):
    (tmp_path / "config.json").write_text(json.dumps(REAL[name][0]))
    with pytest.raises(ModelLoadError, match=r"does not fit: DeepseekV3ForCausalLM: \d+\.\d+B parameters"):
        load_model(ModelConfig(path=str(tmp_path), show_progress=False))


def test_quantized_checkpoint_is_refused_clearly(tmp_path):
    cfg = {**json.loads((write_test_model(tmp_path, "DeepseekV3ForCausalLM") / "config.json").read_text()),
           "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="fp8-quantized weights"):
        load_model(ModelConfig(path=str(tmp_path), show_progress=False))
