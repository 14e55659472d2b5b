"""The config.json fields of real checkpoints at full size (as published; no weights), for tests
that load them: shapes, memory estimates, clear errors."""

from __future__ import annotations

_YARN_DEEPSEEK = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                  "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "ep_size": 1, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
    "initializer_range": 0.02, "rms_norm_eps": 1e-06, "use_cache": True, "bos_token_id": 0,
    "eos_token_id": 1, "tie_word_embeddings": False, "rope_theta": 10000, "rope_scaling": _YARN_DEEPSEEK,
    "attention_bias": False, "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    "quantization_config": _FP8,
}

KIMI_K2 = {
    **DEEPSEEK_V3, "model_type": "kimi_k2", "vocab_size": 163840, "num_attention_heads": 64,
    "num_key_value_heads": 64, "n_routed_experts": 384, "routed_scaling_factor": 2.827, "n_group": 1,
    "topk_group": 1, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0, "rope_theta": 50000.0,
    "max_position_embeddings": 131072, "bos_token_id": 163584, "eos_token_id": 163585,
    "rope_scaling": {**_YARN_DEEPSEEK, "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0},
}

QWEN3_235B_A22B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
    "hidden_size": 4096, "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 94,
    "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-06,
    "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": False,
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 94, "bos_token_id": 151643,
    "eos_token_id": 151645, "torch_dtype": "bfloat16", "router_aux_loss_coef": 0.001,
}

QWEN3_30B_A3B = {
    **QWEN3_235B_A22B, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "max_window_layers": 48,
}

MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-05, "sliding_window": None,
    "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    "router_aux_loss_coef": 0.02, "output_router_logits": False, "attention_dropout": 0.0,
    "torch_dtype": "bfloat16",
}

# name -> (config, published total parameters in billions, active per token in billions)
REAL = {
    "deepseek-v3": (DEEPSEEK_V3, 671, 37),
    "kimi-k2": (KIMI_K2, 1026, 32),
    "qwen3-235b-a22b": (QWEN3_235B_A22B, 235, 22),
    "qwen3-30b-a3b": (QWEN3_30B_A3B, 30.5, 3.3),
    "mixtral-8x7b": (MIXTRAL_8X7B, 46.7, 12.9),
}
