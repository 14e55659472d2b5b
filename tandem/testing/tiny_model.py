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
                "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
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
    if model_type in ("qwen2", "qwen3"):
        cfg.update(use_sliding_window=False, sliding_window=None, max_window_layers=layers)
    if legacy:
        cfg.update(rope_theta=theta, rope_scaling=scaling, torch_dtype=dtype)
    else:
        cfg.update(rope_parameters={"rope_theta": theta, "rope_type": "default", **(scaling or {})},
                   dtype=dtype)
    return cfg


def _random_weights(arch: ModelArch, seed: int, std: float, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        shapes = {name: tuple(p.shape) for name, p in model_class(arch.architecture)(arch).named_parameters()}
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
        weights[name] = w.to(dtype).contiguous()
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
