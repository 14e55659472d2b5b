"""The Llama-family decoder (one implementation) and its Llama / Mistral entry points.

Module and parameter names mirror Hugging Face's, so checkpoint names map one to one
(`model.layers.3.self_attn.q_proj.weight`). Family differences are `DecoderOptions`:
Qwen2 adds a q/k/v bias, Qwen3 an RMSNorm on each query/key head.

Forward contract (see docs/dev/contracts.md, "Model"):
  forward(input_ids [T], positions [T], batch, kv_cache) -> hidden [T, hidden]
  compute_logits(hidden [N, hidden]) -> [N, vocab] float32
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tandem.kernels.fused_ops import FusedOps
from tandem.layers.attention import AttentionWorkspace, paged_attention
from tandem.layers.linear import Embedding, Linear
from tandem.layers.mlp import GatedMLP
from tandem.layers.moe import MoEKernel, SparseMoE
from tandem.layers.norm import RMSNorm
from tandem.layers.rotary import RotaryEmbedding, apply_rotary
from tandem.models.arch import ModelArch
from tandem.layers.attention_batch import AttentionBatch


@dataclass(frozen=True)
class DecoderOptions:
    qkv_bias: bool = False    # bias on q/k/v projections
    o_bias: bool = False      # bias on the output projection
    qk_norm: bool = False     # RMSNorm over head_dim on each query and key head, before RoPE


class DecoderAttention(nn.Module):
    # single-pass CPU kernel for the rotary embedding (set by the loader); None: torch ops
    fused: FusedOps | None = None

    def __init__(self, arch: ModelArch, opts: DecoderOptions, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = arch.num_heads, arch.num_kv_heads, arch.head_dim
        self.scale = arch.head_dim ** -0.5
        h, d = arch.hidden_size, arch.head_dim
        self.q_proj = Linear(h, arch.num_heads * d, bias=opts.qkv_bias)
        self.k_proj = Linear(h, arch.num_kv_heads * d, bias=opts.qkv_bias)
        self.v_proj = Linear(h, arch.num_kv_heads * d, bias=opts.qkv_bias)
        self.o_proj = Linear(arch.num_heads * d, h, bias=opts.o_bias)
        self.q_norm = RMSNorm(d, arch.rms_norm_eps) if opts.qk_norm else None
        self.k_norm = RMSNorm(d, arch.rms_norm_eps) if opts.qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: AttentionBatch,
                kv_cache: torch.Tensor, ws: AttentionWorkspace) -> torch.Tensor:
        # x [T, hidden] -> [T, hidden]
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(T, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.fused is not None and self.fused.supports(q, k, cos, sin):
            q, k = self.fused.rotary_(q, cos, sin), self.fused.rotary_(k, cos, sin)  # fresh tensors: in place
        else:
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        o = paged_attention(q, k, v, kv_cache, self.layer_idx, batch, self.scale, ws)  # [T, H, D]
        return self.o_proj(o.reshape(T, self.num_heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, mlp: nn.Module, arch: ModelArch) -> None:
        """`self_attn(x, cos, sin, batch, kv_cache, ws)` and `mlp(x)`: the family's blocks."""
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                batch: AttentionBatch, kv_cache: torch.Tensor,
                ws: AttentionWorkspace) -> tuple[torch.Tensor, torch.Tensor]:
        # (x, residual) -> (this layer's MLP output, the residual stream before it); the stream
        # after the layer is their sum, added by the next norm (the first layer: residual None,
        # x the embeddings). Same sums, same rounding as x = x + attn(norm(x)); x + mlp(norm(x)).
        if residual is None:
            residual, h = x, self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm.add_forward(x, residual)
        h = self.self_attn(h, cos, sin, batch, kv_cache, ws)
        h, residual = self.post_attention_layernorm.add_forward(h, residual)
        return self.mlp(h), residual


class DecoderModel(nn.Module):
    def __init__(self, arch: ModelArch, layers: list[DecoderLayer]) -> None:
        super().__init__()
        self.embed_tokens = Embedding(arch.vocab_size, arch.hidden_size)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)


class DecoderForCausalLM(nn.Module):
    """Base of every Llama-family model; subclasses only choose `options(arch)`."""

    def __init__(self, arch: ModelArch, device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.arch = arch
        opts = self.options(arch)
        self.model = DecoderModel(arch, [DecoderLayer(self.attention(arch, opts, i), self.feed_forward(arch, i), arch)
                                         for i in range(arch.num_layers)])
        self.lm_head = Linear(arch.hidden_size, arch.vocab_size, bias=False)
        # explicit device: the module may be built under torch.device("meta") before loading
        self.rotary = RotaryEmbedding(arch.head_dim, arch.rope, arch.max_position_embeddings, device)
        # gather buffers reused across layers and steps; one forward at a time per model
        self.workspace = AttentionWorkspace()

    @classmethod
    def options(cls, arch: ModelArch) -> DecoderOptions:
        return DecoderOptions(qkv_bias=arch.attention_bias, o_bias=arch.attention_bias)

    @classmethod
    def attention(cls, arch: ModelArch, opts: DecoderOptions, layer_idx: int) -> nn.Module:
        return DecoderAttention(arch, opts, layer_idx)

    @classmethod
    def feed_forward(cls, arch: ModelArch, layer_idx: int) -> nn.Module:
        """Layer `layer_idx`'s MLP (mixture-of-experts families override it)."""
        return GatedMLP(arch.hidden_size, arch.intermediate_size, bias=arch.mlp_bias)

    @classmethod
    def checkpoint_name(cls, name: str, arch: ModelArch) -> str | None:
        """The parameter a checkpoint tensor loads into (None: not one of this model's, skipped)."""
        return name

    @classmethod
    def saved_name(cls, name: str) -> str:
        """The checkpoint's name of parameter `name` (checkpoint_name's inverse)."""
        return name

    # parameters kept in float32 whatever the model's dtype (name suffixes)
    float32_params: tuple[str, ...] = ()

    # who wants auxiliary hidden states of the runner's forwards (an EAGLE-3 proposer): a
    # tandem.runner.aux_hidden.AuxHiddenTap (the runner, a layer above, owns the type), read by
    # the runner at each step; None (the default) captures nothing and costs nothing
    aux_tap: object | None = None

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch,
                kv_cache: torch.Tensor) -> torch.Tensor:
        # input_ids, positions LongTensor[T] -> hidden [T, hidden] (after the final norm)
        return self._run(input_ids, positions, batch, kv_cache, ())[0]

    @torch.inference_mode()
    def forward_aux(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch,
                    kv_cache: torch.Tensor, layers: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """forward, plus the residual stream after each layer of `layers` (indices, 0-based):
        -> (hidden [T, hidden], aux [T, len(layers), hidden]). The hidden output is the same,
        bit for bit, as forward's: capturing only reads the stream."""
        return self._run(input_ids, positions, batch, kv_cache, layers)

    def _run(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch,
             kv_cache: torch.Tensor, capture: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        residual = None
        taken: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            x, residual = layer(x, residual, cos, sin, batch, kv_cache, self.workspace)
            if i in capture:   # the stream after layer i = its MLP output + the residual before it
                taken[i] = x + residual
        aux = torch.stack([taken[i] for i in capture], dim=1) if capture else None  # [T, k, hidden]
        if residual is None:   # no layers
            return self.model.norm(x), aux
        return self.model.norm.add_forward(x, residual)[0], aux

    def use_fused_ops(self, ops: FusedOps | None) -> None:
        """Run RMSNorm, SiLU-mul and rotary through `ops` (None: torch ops). Outputs may change
        in the last float32 bits; call before serving, not between requests."""
        for m in self.modules():
            if isinstance(m, (RMSNorm, GatedMLP, DecoderAttention)):
                m.fused = ops

    def use_moe_kernel(self, kernel: MoEKernel | None) -> None:
        """Run every MoE layer's experts through `kernel` (None: the loop over experts); stacks
        their weights once (SparseMoE.use_kernel). Call after loading, before serving."""
        if kernel is None:
            return
        for m in self.modules():
            if isinstance(m, SparseMoE):
                m.use_kernel(kernel)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden [N, hidden] -> logits [N, vocab] float32
        return self.lm_head(hidden).float()


class LlamaForCausalLM(DecoderForCausalLM):
    pass


class MistralForCausalLM(DecoderForCausalLM):
    """Mistral = Llama layers. A sliding window is not applied; the loader caps max_model_len at it."""
