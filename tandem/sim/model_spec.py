"""Model descriptions for the cost model: dense (MHA/GQA), MoE and MLA, from a few shapes.

Counts are per token and per layer, from the shapes alone:
- attention projections: GQA q/k/v/o, or MLA (DeepSeek-V3 / Kimi K2): q through a low-rank
  `q_lora_rank`, k/v through the `kv_lora_rank` latent plus a shared `qk_rope_dim` key; the KV
  cache holds the latent and the rope key only (`kv_lora_rank + qk_rope_dim` values per layer);
- MLP: SwiGLU (3 matrices); in a MoE layer `top_k` routed experts of `num_experts` plus
  `shared_experts`, each of `moe_intermediate` width; the first `first_dense_layers` are dense;
- attention FLOPs: for each new token, QK^T and PV over the context: 2 * heads * (qk_dim + v_dim)
  per context token and layer; MLA decode uses the absorbed form (qk = latent + rope, v = latent).
Weights are `weight_bytes` per parameter, routed experts `expert_weight_bytes` (Kimi K2.5 ships
int4 experts: 0.5), the KV cache `kv_bytes` per value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden: int
    num_heads: int
    head_dim: int
    num_kv_heads: int
    intermediate: int              # dense MLP width
    vocab: int
    # MoE (num_experts 0: dense)
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    first_dense_layers: int = 0
    # MLA (kv_lora_rank 0: GQA)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    weight_bytes: float = 2.0
    expert_weight_bytes: float = 2.0
    kv_bytes: float = 2.0
    tie_embeddings: bool = False

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    def attn_params(self) -> int:
        """Attention projection parameters of one layer."""
        h = self.hidden
        if self.is_mla:
            qk = self.qk_nope_dim + self.qk_rope_dim
            q = h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk if self.q_lora_rank \
                else h * self.num_heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_dim) + \
                self.kv_lora_rank * self.num_heads * (self.qk_nope_dim + self.v_head_dim)
            return q + kv + self.num_heads * self.v_head_dim * h
        q = h * self.num_heads * self.head_dim
        return 2 * q + 2 * h * self.num_kv_heads * self.head_dim

    def expert_params(self) -> int:
        return 3 * self.hidden * self.moe_intermediate

    def dense_params(self) -> int:
        """Parameters every token reads: attention, dense MLPs, shared experts, routers."""
        dense_mlp = 3 * self.hidden * self.intermediate
        layers = self.num_layers * self.attn_params() + (self.num_layers - self.moe_layers) * dense_mlp
        layers += self.moe_layers * (self.shared_experts * self.expert_params() + self.hidden * self.num_experts)
        return layers

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    def total_params(self) -> int:
        return self.dense_params() + self.embedding_params() + self.moe_layers * self.num_experts * self.expert_params()

    def active_params(self) -> int:
        """Parameters one token goes through (the lm head excluded: only sampled positions)."""
        return self.dense_params() + self.moe_layers * self.top_k * self.expert_params()

    def weight_bytes_total(self) -> float:
        experts = self.moe_layers * self.num_experts * self.expert_params()
        return (self.total_params() - experts) * self.weight_bytes + experts * self.expert_weight_bytes

    def kv_bytes_per_token(self) -> float:
        """KV cache bytes of one token over all layers."""
        per_layer = self.kv_lora_rank + self.qk_rope_dim if self.is_mla else 2 * self.num_kv_heads * self.head_dim
        return per_layer * self.num_layers * self.kv_bytes

    def attn_dims(self, decode: bool) -> tuple[int, int]:
        """(qk_dim, v_dim) per head of the attention products."""
        if not self.is_mla:
            return self.head_dim, self.head_dim
        if decode:   # absorbed: queries meet the latent directly
            return self.kv_lora_rank + self.qk_rope_dim, self.kv_lora_rank
        return self.qk_nope_dim + self.qk_rope_dim, self.v_head_dim


# Kimi K2 / K2.5 (Moonshot; DeepSeek-V3 architecture): 61 layers, MLA, 384 experts top-8 + 1 shared,
# ~1.04T parameters, ~32B active; int4 routed experts (K2.5 / K2-Thinking ship them quantized)
KIMI_K25 = ModelSpec("kimi-k2.5", num_layers=61, hidden=7168, num_heads=64, head_dim=128, num_kv_heads=64,
                     intermediate=18432, vocab=163840, num_experts=384, top_k=8, moe_intermediate=2048,
                     shared_experts=1, first_dense_layers=1, q_lora_rank=1536, kv_lora_rank=512,
                     qk_nope_dim=128, qk_rope_dim=64, v_head_dim=128, expert_weight_bytes=0.5)
# a dense GQA reference (Llama 3.1 8B shapes)
LLAMA_8B = ModelSpec("llama-3.1-8b", num_layers=32, hidden=4096, num_heads=32, head_dim=128, num_kv_heads=8,
                     intermediate=14336, vocab=128256)
# a small MoE with GQA (Qwen3-30B-A3B shapes)
QWEN3_30B_A3B = ModelSpec("qwen3-30b-a3b", num_layers=48, hidden=2048, num_heads=32, head_dim=128,
                          num_kv_heads=4, intermediate=6144, vocab=151936, num_experts=128, top_k=8,
                          moe_intermediate=768)
# the disaggregation benchmark's model (benchmarks/disagg/make_model.py) and the shipped demo target
LLAMA512 = ModelSpec("llama512", num_layers=8, hidden=512, num_heads=8, head_dim=64, num_kv_heads=4,
                     intermediate=1024, vocab=4096)
DEMO_TARGET = ModelSpec("tandem-demo-target", num_layers=6, hidden=256, num_heads=8, head_dim=32,
                        num_kv_heads=4, intermediate=768, vocab=4096, tie_embeddings=True)

MODELS = {m.name: m for m in (KIMI_K25, LLAMA_8B, QWEN3_30B_A3B, LLAMA512, DEMO_TARGET)}


def from_hf_config(path: str | Path) -> ModelSpec:
    """A spec from a Hugging Face config.json (Llama/Qwen dense, Qwen MoE, DeepSeek-V3 MLA fields)."""
    p = Path(path)
    cfg = json.loads((p / "config.json" if p.is_dir() else p).read_text())
    heads = cfg["num_attention_heads"]
    return ModelSpec(
        name=p.name if p.is_dir() else p.parent.name, num_layers=cfg["num_hidden_layers"],
        hidden=cfg["hidden_size"], num_heads=heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        num_kv_heads=cfg.get("num_key_value_heads", heads), intermediate=cfg["intermediate_size"],
        vocab=cfg["vocab_size"], num_experts=_num_experts(cfg),
        top_k=cfg.get("num_experts_per_tok", 0), moe_intermediate=cfg.get("moe_intermediate_size", 0),
        shared_experts=cfg.get("n_shared_experts", 0), first_dense_layers=cfg.get("first_k_dense_replace", 0),
        q_lora_rank=cfg.get("q_lora_rank") or 0, kv_lora_rank=cfg.get("kv_lora_rank") or 0,
        qk_nope_dim=cfg.get("qk_nope_head_dim", 0), qk_rope_dim=cfg.get("qk_rope_head_dim", 0),
        v_head_dim=cfg.get("v_head_dim", 0), tie_embeddings=bool(cfg.get("tie_word_embeddings", False)))


def _num_experts(cfg: dict) -> int:
    """Routed experts under each name transformers reads them by (DeepSeek-V3's, transformers 5's,
    transformers 4's Qwen-MoE); tandem/models/config_aliases.py has the whole table."""
    return int(cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0)


def model_spec(name: str) -> ModelSpec:
    """A preset by name, or a model directory / config.json path."""
    if name in MODELS:
        return MODELS[name]
    if Path(name).exists():
        return from_hf_config(name)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)} or give a model directory")
