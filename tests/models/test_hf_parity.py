"""Our paged model's logits equal transformers' on the same random checkpoint.

Three sequences go through chunked prefill (block size 4, chunks crossing block borders,
one single-token prefill) and mixed decode steps; every produced row is compared with the
row of a plain full-sequence transformers forward.
"""

from __future__ import annotations

import pytest
import torch

from tandem.config import ModelConfig
from tandem.models.loader import load_model
from tandem.testing.paged_driver import PagedDriver
from tandem.testing.tiny_model import write_test_model

transformers = pytest.importorskip("transformers")

# (sequence id, token range) pieces per step; sequences "a", "b", "c" have 17, 9 and 5 tokens
STEPS = [
    [("a", (0, 6)), ("b", (0, 9))],
    [("c", (0, 1)), ("b", (9, 10)), ("a", (6, 11))],
    [("a", (11, 17)), ("b", (10, 11)), ("c", (1, 2))],
    [("b", (11, 12)), ("c", (2, 3)), ("a", (17, 18))],
    [("c", (3, 5)), ("a", (18, 19))],
]
LENGTHS = {"a": 19, "b": 12, "c": 5}


def run_parity(path, dtype: str, atol: float, rtol: float = 0.0, fused: bool = True) -> None:
    torch.set_num_threads(1)
    loaded = load_model(ModelConfig(path=str(path), dtype=dtype, show_progress=False, fused_layers=fused))
    assert (loaded.model.model.norm.fused is not None) == fused   # the path under test is the one taken
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=loaded.dtype).eval()
    gen = torch.Generator().manual_seed(1)
    tokens = {k: torch.randint(0, loaded.arch.vocab_size, (n,), generator=gen).tolist()
              for k, n in LENGTHS.items()}
    with torch.no_grad():
        ref = {k: hf(torch.tensor([t])).logits[0].float() for k, t in tokens.items()}
    a = loaded.arch
    driver = PagedDriver(loaded.model, a.num_layers, a.num_kv_heads, a.head_dim, loaded.dtype, block_size=4)
    if a.kv_kind == "mla":   # one latent per token and layer: [blocks, layers, 1, block, 1, latent]
        gen_kv = torch.Generator().manual_seed(0)
        shape = (driver.kv_cache.shape[0], a.num_layers, 1, 4, 1, a.kv_dim_cached)
        driver.kv_cache = torch.randn(shape, generator=gen_kv).to(loaded.dtype)
    for step in STEPS:
        logits = driver.step([(k, tokens[k][s:e]) for k, (s, e) in step])
        row = 0
        for k, (s, e) in step:
            torch.testing.assert_close(logits[row:row + e - s], ref[k][s:e], atol=atol, rtol=rtol,
                                       msg=lambda m: f"sequence {k} tokens [{s}, {e}): {m}")
            row += e - s


ARCHS = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
         "MixtralForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"]


@pytest.mark.parametrize("fused", [True, False], ids=["fused-layers", "torch-layers"])
@pytest.mark.parametrize("arch", ARCHS)
def test_float32_matches_transformers(tmp_path, arch, fused):
    run_parity(write_test_model(tmp_path, arch, seed=3), "float32", atol=1e-4, fused=fused)


@pytest.mark.parametrize("fused", [True, False], ids=["fused-layers", "torch-layers"])
@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_matches_transformers(tmp_path, arch, fused):
    run_parity(write_test_model(tmp_path, arch, dtype="bfloat16", seed=4), "auto", atol=3e-2, rtol=3e-2, fused=fused)


def test_llama3_rope_scaling(tmp_path):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
    run_parity(write_test_model(tmp_path, rope_scaling=scaling, rope_theta=500000.0), "float32", atol=1e-4)


@pytest.mark.parametrize("extra", [{}, {"mscale": 0.8, "mscale_all_dim": 0.5, "beta_fast": 16},
                                   {"attention_factor": 1.3, "truncate": False}],
                         ids=["qwen-style", "mscale", "attention-factor"])
def test_yarn_rope_scaling(tmp_path, extra):
    # positions well past the original 8-token context: interpolated and kept bands both show
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8, **extra}
    path = write_test_model(tmp_path, "Qwen3ForCausalLM", rope_scaling=scaling, rope_theta=10000.0)
    run_parity(path, "float32", atol=1e-4)


def test_linear_rope_scaling_legacy_config(tmp_path):
    path = write_test_model(tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0}, legacy_config=True)
    run_parity(path, "float32", atol=1e-4)


def test_tied_embeddings(tmp_path):
    path = write_test_model(tmp_path, "Qwen3ForCausalLM", tie_word_embeddings=True)
    run_parity(path, "float32", atol=1e-4)
    loaded = load_model(ModelConfig(path=str(path), show_progress=False))
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight


def test_float32_model_as_bfloat16(tmp_path):
    run_parity(write_test_model(tmp_path), "bfloat16", atol=3e-2, rtol=3e-2)


# DeepSeek-V3's variants: YaRN with mscale (the softmax scale grows, cos/sin scaled), no query
# LoRA, RoPE over halves, Kimi K2's single expert group, no shared expert, several dense layers
DEEPSEEK_VARIANTS = {
    "yarn-mscale": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                                     "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}},
    "no-q-lora": {"extra_config": {"q_lora_rank": None}},
    "rope-halves": {"extra_config": {"rope_interleave": False}},
    "kimi-k2-routing": {"extra_config": {"n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827,
                                         "n_routed_experts": 12, "num_experts_per_tok": 3}},
    "no-shared-two-dense": {"num_layers": 3, "extra_config": {"n_shared_experts": 0, "first_k_dense_replace": 2}},
}


@pytest.mark.parametrize("variant", sorted(DEEPSEEK_VARIANTS))
def test_deepseek_v3_variants(tmp_path, variant):
    path = write_test_model(tmp_path, "DeepseekV3ForCausalLM", seed=6, **DEEPSEEK_VARIANTS[variant])
    run_parity(path, "float32", atol=1e-4)


@pytest.mark.parametrize("extra", [{"norm_topk_prob": False}, {"mlp_only_layers": [0]},
                                   {"decoder_sparse_step": 2, "num_experts_per_tok": 1}],
                         ids=["unnormalized", "mlp-only-layer", "sparse-step"])
def test_qwen3_moe_variants(tmp_path, extra):
    run_parity(write_test_model(tmp_path, "Qwen3MoeForCausalLM", seed=7, extra_config=extra), "float32", atol=1e-4)
