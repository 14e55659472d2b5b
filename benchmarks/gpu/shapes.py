"""The benchmark's models as config.json dicts: real checkpoints' shapes (weights are random) and,
for --smoke, tiny models of the same families (the same code paths in seconds)."""

from __future__ import annotations

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "bos_token_id": 128000,
    "eos_token_id": 128009, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
    "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "attention_bias": False,
    "tie_word_embeddings": False, "use_sliding_window": False, "bos_token_id": 151643, "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}

# one MoE layer of DeepSeek-V3 at full width (MLA, 256 routed + 1 shared expert), bfloat16 (the
# published checkpoint is fp8), with its embedding and LM head
DEEPSEEK_V3_LAYER = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 1,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 0, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "max_position_embeddings": 163840, "rms_norm_eps": 1e-06, "bos_token_id": 0,
    "eos_token_id": 1, "tie_word_embeddings": False, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "attention_bias": False, "torch_dtype": "bfloat16",
}

_TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
         "bos_token_id": 1, "eos_token_id": 2}

MODELS = {"llama3-8b": LLAMA3_8B, "qwen3-30b-a3b": QWEN3_30B_A3B, "deepseek-v3-layer": DEEPSEEK_V3_LAYER}
TINY_MODELS = {
    "llama3-8b": {**LLAMA3_8B, **_TINY},
    "qwen3-30b-a3b": {**QWEN3_30B_A3B, **_TINY, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
                      "moe_intermediate_size": 32},
    "deepseek-v3-layer": {**DEEPSEEK_V3_LAYER, **_TINY, "num_hidden_layers": 1, "num_key_value_heads": 4,
                          "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                          "n_group": 4, "topk_group": 2, "kv_lora_rank": 32, "q_lora_rank": 48,
                          "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
                          "rope_scaling": {**DEEPSEEK_V3_LAYER["rope_scaling"], "factor": 32,
                                           "original_max_position_embeddings": 16}},
}
