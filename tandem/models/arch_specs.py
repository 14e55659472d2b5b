"""The parts of a checkpoint's shape beyond a dense decoder: mixture of experts (MoESpec) and
multi-head latent attention (MLASpec), parsed from config.json by each family's field names.

Families and their routing, as transformers computes it:
- Mixtral: softmax over the router logits (float32), top-k, always renormalized, the weights
  kept in float32 when they scale the experts' outputs.
- Qwen3-MoE: softmax (float32), top-k, renormalized when `norm_topk_prob`, weights cast to the
  model's dtype; dense layers where `mlp_only_layers` or `decoder_sparse_step` say so.
- DeepSeek-V3 / Kimi K2: sigmoid scores (router in float32); the choice adds
  `e_score_correction_bias` and is limited to the `topk_group` best of `n_group` groups (a
  group scores the sum of its two best experts); the weights are the raw sigmoid scores of
  the chosen experts, renormalized when `norm_topk_prob`, times `routed_scaling_factor`;
  `n_shared_experts` always-on experts; the first `first_k_dense_replace` layers are dense.
"""

from __future__ import annotations

from tandem.errors import ModelLoadError
from tandem.layers.mla_spec import MLASpec
from tandem.layers.moe_spec import MoESpec


def parse_moe(cfg: dict, model_type: str, num_layers: int) -> MoESpec | None:
    """The MoE part of config.json (its fields under transformers' stored names:
    config_aliases.canonical_config), or None for a dense model."""
    try:
        if model_type == "mixtral":
            return MoESpec(num_experts=int(cfg["num_local_experts"]), top_k=int(cfg["num_experts_per_tok"]),
                           expert_intermediate_size=int(cfg["intermediate_size"]))
        if model_type == "qwen3_moe":
            step = int(cfg.get("decoder_sparse_step") or 1)
            only = set(cfg.get("mlp_only_layers") or [])
            num_experts = int(cfg["num_local_experts"])
            dense = frozenset(i for i in range(num_layers)
                              if i in only or num_experts == 0 or (i + 1) % step != 0)
            return MoESpec(num_experts=num_experts, top_k=int(cfg["num_experts_per_tok"]),
                           expert_intermediate_size=int(cfg["moe_intermediate_size"]),
                           normalize=bool(cfg.get("norm_topk_prob", False)), weights_float32=False,
                           dense_layers=dense)
        if "n_routed_experts" in cfg and "kv_lora_rank" in cfg:   # deepseek_v3, kimi_k2
            scoring = str(cfg.get("scoring_func", "sigmoid"))
            if scoring != "sigmoid":
                raise ModelLoadError(f"scoring_func {scoring!r} is not supported for "
                                     f"{model_type}; DeepSeek-V3's is 'sigmoid'")
            method = cfg.get("topk_method", "noaux_tc")
            if method != "noaux_tc":
                raise ModelLoadError(f"topk_method {method!r} is not supported; DeepSeek-V3's is 'noaux_tc'")
            first_dense = int(cfg.get("first_k_dense_replace") or 0)
            freq = int(cfg.get("moe_layer_freq") or 1)
            dense = frozenset(i for i in range(num_layers) if i < first_dense or i % freq != 0)
            return MoESpec(num_experts=int(cfg["n_routed_experts"]), top_k=int(cfg["num_experts_per_tok"]),
                           expert_intermediate_size=int(cfg["moe_intermediate_size"]), scoring="sigmoid",
                           normalize=bool(cfg.get("norm_topk_prob", True)), router_float32=True,
                           num_groups=int(cfg.get("n_group") or 1), topk_groups=int(cfg.get("topk_group") or 1),
                           scaling=float(cfg.get("routed_scaling_factor") or 1.0), correction_bias=True,
                           num_shared_experts=int(cfg.get("n_shared_experts") or 0), dense_layers=dense)
    except KeyError as e:
        raise ModelLoadError(f"config.json of a {model_type} model lacks {e.args[0]!r}") from e
    return None


def parse_mla(cfg: dict) -> MLASpec | None:
    """The MLA part of config.json (DeepSeek-V2/V3, Kimi K2), or None."""
    if "kv_lora_rank" not in cfg:
        return None
    q_rank = cfg.get("q_lora_rank")
    return MLASpec(q_lora_rank=int(q_rank) if q_rank else None, kv_lora_rank=int(cfg["kv_lora_rank"]),
                   qk_nope_head_dim=int(cfg["qk_nope_head_dim"]), qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
                   v_head_dim=int(cfg["v_head_dim"]), rope_interleave=bool(cfg.get("rope_interleave", True)))


def validate_moe(moe: MoESpec) -> None:
    if not 1 <= moe.top_k <= moe.num_experts:
        raise ModelLoadError(f"num_experts_per_tok={moe.top_k} must be in 1..{moe.num_experts}")
    if moe.num_experts % moe.num_groups or not 1 <= moe.topk_groups <= moe.num_groups:
        raise ModelLoadError(f"n_group={moe.num_groups} must divide {moe.num_experts} experts and "
                             f"topk_group={moe.topk_groups} be in 1..n_group")
    if moe.num_groups > 1 and moe.topk_groups * (moe.num_experts // moe.num_groups) < moe.top_k:
        raise ModelLoadError(f"topk_group={moe.topk_groups} groups hold fewer than "
                             f"num_experts_per_tok={moe.top_k} experts")
