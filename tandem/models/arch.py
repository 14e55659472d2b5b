"""ModelArch: the shape of a decoder-only checkpoint, parsed once from its config.json.

Accepts both config styles: transformers <5 (`rope_theta`, `rope_scaling`, `torch_dtype`) and
transformers 5 (`rope_parameters`, `dtype`), and each field under any of the aliases transformers
reads it by (models/config_aliases.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tandem.errors import ModelLoadError
from tandem.layers.mla_spec import MLASpec
from tandem.layers.moe_spec import MoESpec
from tandem.layers.rope_spec import RopeSpec
from tandem.models.arch_specs import parse_mla, parse_moe, validate_moe
from tandem.models.config_aliases import canonical_config

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class ModelArch:
    architecture: str               # e.g. "LlamaForCausalLM"
    model_type: str                 # e.g. "llama"
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope: RopeSpec
    tie_word_embeddings: bool = False
    attention_bias: bool = False    # bias on q/k/v (Qwen2 always; Llama when configured)
    mlp_bias: bool = False
    torch_dtype: str | None = None  # the checkpoint's dtype name, e.g. "bfloat16"
    sliding_window: int | None = None  # recorded only; not applied (see loader)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    moe: MoESpec | None = None          # mixture of experts (Mixtral, Qwen3-MoE, DeepSeek-V3)
    mla: MLASpec | None = None          # multi-head latent attention (DeepSeek-V3, Kimi K2)
    quantization: str | None = None     # quantization_config's method, e.g. "fp8" (not loadable)

    @property
    def kv_kind(self) -> str:
        """The KV cache's layout kind: "mla" caches one latent per token, "mha" keys and values."""
        return "mla" if self.mla is not None else "mha"

    @property
    def kv_heads_cached(self) -> int:
        return 1 if self.mla is not None else self.num_kv_heads

    @property
    def kv_dim_cached(self) -> int:
        return self.mla.latent_dim if self.mla is not None else self.head_dim

    def context_length(self, configured: int | None = None) -> int:
        """The longest context served: `configured`, else max_position_embeddings (with YaRN, at
        least the original context times its factor, as vLLM derives it); never past a sliding
        window, which the attention does not implement (full attention equals windowed
        attention up to the window)."""
        limit = configured or self.max_position_embeddings
        if not configured and self.rope.rope_type == "yarn" and self.rope.original_max_position_embeddings:
            limit = max(limit, int(self.rope.original_max_position_embeddings * self.rope.factor))
        if self.sliding_window:
            limit = min(limit, self.sliding_window)
        return limit

    @classmethod
    def from_dir(cls, path: str | Path) -> "ModelArch":
        cfg_path = Path(path) / "config.json"
        if not cfg_path.is_file():
            raise ModelLoadError(f"missing file {cfg_path}: a model directory needs config.json")
        try:
            cfg = json.loads(cfg_path.read_text())
        except json.JSONDecodeError as e:
            raise ModelLoadError(f"{cfg_path} is not valid JSON: {e}") from e
        return cls.from_config(cfg)

    @classmethod
    def from_config(cls, cfg: dict) -> "ModelArch":
        cfg = canonical_config(cfg)
        archs = cfg.get("architectures") or []
        if not archs:
            raise ModelLoadError("config.json has no 'architectures' entry; cannot pick a model class")
        try:
            hidden = int(cfg["hidden_size"])
            num_heads = int(cfg["num_attention_heads"])
            num_layers = int(cfg["num_hidden_layers"])
            intermediate = int(cfg["intermediate_size"])
            vocab = int(cfg["vocab_size"])
        except KeyError as e:
            raise ModelLoadError(f"config.json lacks required field {e.args[0]!r}") from e
        num_kv_heads = int(cfg.get("num_key_value_heads") or num_heads)
        head_dim = int(cfg.get("head_dim") or hidden // num_heads)
        if num_heads % num_kv_heads:
            raise ModelLoadError(f"num_attention_heads={num_heads} is not a multiple of "
                                 f"num_key_value_heads={num_kv_heads}")
        model_type = str(cfg.get("model_type", ""))
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if isinstance(eos, int) else ())
        sliding = cfg.get("sliding_window")
        if model_type in ("qwen2", "qwen3", "qwen3_moe"):
            sliding = sliding if cfg.get("use_sliding_window") else None
        mla = parse_mla(cfg)
        if mla is not None:   # RoPE covers only each head's qk_rope_head_dim dims (as transformers)
            head_dim = mla.qk_rope_head_dim
        moe = parse_moe(cfg, model_type, num_layers)
        if moe is not None:
            validate_moe(moe)
        quant = cfg.get("quantization_config")
        return cls(
            architecture=str(archs[0]),
            model_type=model_type,
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            hidden_size=hidden,
            intermediate_size=intermediate,
            vocab_size=vocab,
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope=parse_rope(cfg),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            # Qwen2's config has no attention_bias field: its q/k/v always carry a bias.
            attention_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
            sliding_window=int(sliding) if sliding else None,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
            moe=moe,
            mla=mla,
            quantization=str(quant.get("quant_method", "unknown")) if isinstance(quant, dict) else None,
        )


def parse_rope(cfg: dict) -> RopeSpec:
    """RoPE settings from `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling`."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or {}
    # rope_parameters may be per layer type ({"full_attention": {...}}); these models use one.
    if params and "rope_theta" not in params and "rope_type" not in params:
        params = dict(next(iter(params.values())))
    merged = {**scaling, **params}
    theta = float(merged.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope_type = str(merged.get("rope_type") or merged.get("type") or "default")
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ModelLoadError(f"unsupported rope type {rope_type!r}; supported: "
                             + ", ".join(SUPPORTED_ROPE_TYPES))
    orig = merged.get("original_max_position_embeddings")
    factor = merged.get("factor")
    if factor is None and rope_type == "yarn" and orig:
        factor = int(cfg.get("max_position_embeddings") or orig) / int(orig)  # as transformers
    attention_factor = merged.get("attention_factor")
    return RopeSpec(
        theta=theta,
        rope_type=rope_type,
        factor=float(factor if factor is not None else 1.0),
        low_freq_factor=float(merged.get("low_freq_factor", 1.0)),
        high_freq_factor=float(merged.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(orig) if orig else None,
        beta_fast=float(merged.get("beta_fast") or 32.0),
        beta_slow=float(merged.get("beta_slow") or 1.0),
        attention_factor=float(attention_factor) if attention_factor is not None else None,
        mscale=_opt_float(merged.get("mscale")),
        mscale_all_dim=_opt_float(merged.get("mscale_all_dim")),
        truncate=bool(merged.get("truncate", True)),
    )


def _opt_float(value) -> float | None:
    return float(value) if value is not None else None
