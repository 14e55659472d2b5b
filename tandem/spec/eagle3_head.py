"""The EAGLE-3 head: one decoder layer of the target's width that drafts from the target's own
hidden states (tandem/spec/eagle3.py drives it; tandem_demo/eagle3_train.py trains it).

Row p of the head reads `feat_p` and the embedding of token p+1 and predicts token p+2:
- feat_p is fc(concat of the target's residual stream after `aux_layers`, low, middle and
  high) at position p for rows whose target states exist (the request's accepted tokens), or
  the head's own output at row p-1 for the rows it drafts after them (EAGLE-3's unrolling);
- x = concat(embed_norm(embed(t_{p+1})), hidden_norm(feat_p))            [T, 2H]
- h = feat_p + o_proj(attention(q(x), k(x), v(x)))  (causal over the head's own rows, RoPE at p)
- out_p = h + mlp(post_attention_layernorm(h))                          [T, H]
- logits = target.lm_head(norm(out_p))  (the target's embedding and LM head, shared)
The head owns fc, the norms, one attention and one MLP; nothing of the target is stored with it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from tandem.layers.attention import AttentionWorkspace, paged_attention
from tandem.layers.attention_batch import AttentionBatch
from tandem.layers.linear import Linear
from tandem.layers.mlp import GatedMLP
from tandem.layers.norm import RMSNorm
from tandem.layers.rotary import RopeSpec, RotaryEmbedding, apply_rotary


@dataclass(frozen=True)
class TargetSignature:
    """What the head was trained against; the loader refuses a target that differs."""
    hidden_size: int
    num_layers: int
    vocab_size: int
    fingerprint: str              # tandem.spec.eagle3_loader.target_fingerprint of its weights
    model_file_sha: str = ""      # git blob hash of the target's model.safetensors (for people)


@dataclass(frozen=True)
class Eagle3Config:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    aux_layers: tuple[int, ...]   # target layers whose output stream feeds fc (low, middle, high)
    target: TargetSignature
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    dtype: str = "bfloat16"       # of the shipped weights; the head runs in the target's dtype
    training: dict = field(default_factory=dict)   # how it was trained (informational)

    def to_json(self) -> str:
        raw = asdict(self)
        raw["architectures"] = ["Eagle3Head"]
        raw["aux_layers"] = list(self.aux_layers)
        return json.dumps(raw, indent=2)

    @classmethod
    def from_file(cls, path: Path) -> "Eagle3Config":
        raw = json.loads(path.read_text())
        raw.pop("architectures", None)
        raw["aux_layers"] = tuple(raw["aux_layers"])
        raw["target"] = TargetSignature(**raw["target"])
        return cls(**raw)


class Eagle3Head(nn.Module):
    def __init__(self, cfg: Eagle3Config, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.cfg = cfg
        h, d, k = cfg.hidden_size, cfg.head_dim, len(cfg.aux_layers)
        self.fc = Linear(k * h, h, bias=False)
        self.embed_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.q_proj = Linear(2 * h, cfg.num_heads * d, bias=False)
        self.k_proj = Linear(2 * h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = Linear(2 * h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = Linear(cfg.num_heads * d, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = GatedMLP(h, cfg.intermediate_size)
        self.norm = RMSNorm(h, cfg.rms_norm_eps)
        rope = RopeSpec(theta=cfg.rope_theta)
        self.rotary = RotaryEmbedding(d, rope, cfg.max_position_embeddings, device)
        self.scale = d ** -0.5
        self.workspace = AttentionWorkspace()

    def use_fused_ops(self, ops) -> None:
        """Run RMSNorm and SiLU-mul through `ops` (tandem.kernels.fused_ops; None: torch ops)."""
        for m in self.modules():
            if isinstance(m, (RMSNorm, GatedMLP)):
                m.fused = ops

    def fuse(self, aux: torch.Tensor) -> torch.Tensor:
        # aux [T, k, H] (the target's captured streams) -> feat [T, H]
        return self.fc(aux.reshape(aux.shape[0], -1))

    def qkv(self, feat: torch.Tensor, emb: torch.Tensor, positions: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # feat, emb [T, H]; positions [T] -> q [T, heads, D], k/v [T, kv_heads, D] (RoPE applied)
        c = self.cfg
        T = feat.shape[0]
        x = torch.cat((self.embed_norm(emb), self.hidden_norm(feat)), dim=-1)   # [T, 2H]
        q = self.q_proj(x).view(T, c.num_heads, c.head_dim)
        k = self.k_proj(x).view(T, c.num_kv_heads, c.head_dim)
        v = self.v_proj(x).view(T, c.num_kv_heads, c.head_dim)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def finish(self, feat: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        # feat [T, H]; attn [T, heads, D] -> out [T, H] (the next unrolled row's feat)
        h = feat + self.o_proj(attn.reshape(attn.shape[0], -1))
        return h + self.mlp(self.post_attention_layernorm(h))

    @torch.inference_mode()
    def forward(self, feat: torch.Tensor, emb: torch.Tensor, positions: torch.Tensor,
                batch: AttentionBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        """Rows over the head's paged KV (layer 0 of `kv_cache`) -> out [T, H]."""
        q, k, v = self.qkv(feat, emb, positions)
        return self.finish(feat, paged_attention(q, k, v, kv_cache, 0, batch, self.scale, self.workspace))


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """Low, middle and high layers (EAGLE-3's choice: early, middle, and near the top)."""
    if num_layers < 3:
        return tuple(range(num_layers))
    return (min(1, num_layers - 3), num_layers // 2, num_layers - 1)


def init_head(head: Eagle3Head, seed: int) -> Eagle3Head:
    """Random weights for training from scratch (Linear skips torch's own init): normal(0, 0.02),
    output projections scaled down so the untrained head passes its input feature through."""
    g = torch.Generator().manual_seed(seed)
    for name, p in head.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                std = 0.02 / (2 ** 0.5) if name.startswith(("o_proj", "mlp.down_proj")) else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return head
