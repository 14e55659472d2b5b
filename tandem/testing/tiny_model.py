"""Write a small random Hugging Face checkpoint (any supported architecture) for tests and demos.

The directory holds exactly what a Hub model has: config.json, model.safetensors (or shards
plus model.safetensors.index.json), tokenizer.json, tokenizer_config.json, chat_template.jinja,
generation_config.json. It loads in transformers' AutoModelForCausalLM / AutoTokenizer.
Weights are random from `seed`; norms and biases are perturbed too so that every parameter
matters in a logits comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer

from tandem.models.arch import ModelArch
from tandem.models.registry import model_class, supported_architectures
from tandem.testing.tiny_tokenizer import CHAT_TEMPLATE, eos_tokens, tokenizer_config, trained_tokenizer_json

_MODEL_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral",
                "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV3ForCausalLM": "deepseek_v3"}
# small MoE / MLA settings per family (config.json field names); `extra_config` overrides them
_FAMILY_DEFAULTS = {
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None,
                "router_jitter_noise": 0.0},
    "qwen3_moe": {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "deepseek_v3": {"n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 32, "n_group": 4, "topk_group": 2,
                    "routed_scaling_factor": 2.5, "first_k_dense_replace": 1, "norm_topk_prob": True,
                    "kv_lora_rank": 32, "q_lora_rank": 48, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "rope_interleave": True, "topk_method": "noaux_tc",
                    "scoring_func": "sigmoid", "num_nextn_predict_layers": 0},
}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def write_test_model(
    out_dir: str | Path,
    architecture: str = "LlamaForCausalLM",
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int | None = None,
    intermediate_size: int = 128,
    vocab_size: int = 512,
    max_position_embeddings: int = 2048,
    dtype: str = "float32",
    tie_word_embeddings: bool = False,
    seed: int = 0,
    rope_theta: float = 10000.0,
    rope_scaling: dict | None = None,    # e.g. {"rope_type": "llama3", "factor": 8.0, ...}
    legacy_config: bool = False,          # rope_theta/rope_scaling/torch_dtype instead of rope_parameters/dtype
    init_std: float = 0.08,
    max_shard_bytes: int | None = None,   # split the weights into shards of at most this size
    chat_template_in_config: bool = False,  # template inside tokenizer_config.json, not chat_template.jinja
    extra_config: dict | None = None,     # config.json fields over the family's small MoE / MLA defaults
) -> Path:
    if architecture not in _MODEL_TYPES:
        raise ValueError(f"unknown architecture {architecture!r}; choose one of {supported_architectures()}")
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {tuple(_DTYPES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    style = "qwen" if architecture.startswith("Qwen") else "llama"
    tok = Tokenizer.from_str(trained_tokenizer_json(vocab_size, style))
    ids = {t: tok.token_to_id(t) for t in eos_tokens(style)}
    bos_id = tok.token_to_id("<|bos|>") if style == "llama" else None
    eos_ids = list(ids.values())
    pad_id = tok.token_to_id("<|pad|>" if style == "llama" else "<|endoftext|>")

    config = _config(architecture, hidden_size, num_layers, num_heads, num_kv_heads,
                     head_dim or hidden_size // num_heads, intermediate_size, vocab_size,
                     max_position_embeddings, dtype, tie_word_embeddings, rope_theta, rope_scaling,
                     legacy_config)
    config.update(extra_config or {})
    config.update(bos_token_id=bos_id, eos_token_id=eos_ids[0], pad_token_id=pad_id)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    weights = _random_weights(ModelArch.from_config(config), seed, init_std, _DTYPES[dtype])
    _save_weights(out, weights, max_shard_bytes)

    tok.save(str(out / "tokenizer.json"))
    tcfg = tokenizer_config(tok, style, max_position_embeddings)
    if chat_template_in_config:
        tcfg["chat_template"] = CHAT_TEMPLATE
    else:
        (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n")
    gen = {"bos_token_id": bos_id, "eos_token_id": eos_ids, "pad_token_id": pad_id,
           "do_sample": True, "temperature": 0.7, "top_p": 0.9}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return out


def _config(architecture, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, max_pos,
            dtype, tied, theta, scaling, legacy) -> dict:
    model_type = _MODEL_TYPES[architecture]
    cfg = {
        "architectures": [architecture], "model_type": model_type, "hidden_act": "silu",
        "hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "max_position_embeddings": max_pos, "rms_norm_eps": 1e-6, "vocab_size": vocab,
        "tie_word_embeddings": tied, "initializer_range": 0.02, "use_cache": True,
        "attention_dropout": 0.0,
    }
    if model_type in ("llama", "qwen3"):
        cfg["attention_bias"] = False
    if model_type == "llama":
        cfg["mlp_bias"] = False
    if model_type == "mistral":
        cfg["sliding_window"] = None
    if model_type in ("qwen2", "qwen3", "qwen3_moe"):
        cfg.update(use_sliding_window=False, sliding_window=None, max_window_layers=layers)
    if model_type in ("qwen3_moe", "deepseek_v3"):
        cfg["attention_bias"] = False
    if model_type == "deepseek_v3":
        del cfg["head_dim"]             # transformers derives it (qk_rope_head_dim)
        cfg["num_key_value_heads"] = heads
    cfg.update(_FAMILY_DEFAULTS.get(model_type, {}))
    if legacy:
        cfg.update(rope_theta=theta, rope_scaling=scaling, torch_dtype=dtype)
    else:
        cfg.update(rope_parameters={"rope_theta": theta, "rope_type": "default", **(scaling or {})},
                   dtype=dtype)
    return cfg


def _random_weights(arch: ModelArch, seed: int, std: float, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    cls = model_class(arch.architecture)
    with torch.device("meta"):
        shapes = {name: tuple(p.shape) for name, p in cls(arch).named_parameters()}
    if arch.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if "norm" in name:
            w = 1.0 + 0.2 * (torch.rand(shape, generator=gen) - 0.5)
        elif name.endswith("bias"):
            w = 0.1 * torch.randn(shape, generator=gen)
        else:
            w = std * torch.randn(shape, generator=gen)
        keep = torch.float32 if name.endswith(cls.float32_params) else dtype   # as real checkpoints
        weights[cls.saved_name(name)] = w.to(keep).contiguous()
    return weights


def _save_weights(out: Path, weights: dict[str, torch.Tensor], max_shard_bytes: int | None) -> None:
    meta = {"format": "pt"}
    if not max_shard_bytes:
        save_file(weights, str(out / "model.safetensors"), metadata=meta)
        return
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in weights.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata=meta)
        weight_map.update({name: fname for name in shard})
    total = sum(t.numel() * t.element_size() for t in weights.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
