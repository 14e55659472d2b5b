"""Lower bounds on a step's time from the machine's limits (limits.py) and the model's shape: the
step cannot be faster than reading what it must read at the copy bandwidth, nor than its matrix
products at the matmul rate; bound = the larger. A measurement's fraction = bound / measured
(1.0: at the machine's limit).

What a step must read: every weight but the embedding (one row per token) and the routed experts
it touches (at B tokens of k choices among E experts, routed uniformly as random weights route,
E * (1 - (1 - k/E)^B) of them per layer), plus the KV of every context token. What it computes:
2 FLOPs per weight a token passes through, plus attention: per query and context token, QK and
PV over every head (MLA decode in its absorbed form: over the latent).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from benchmarks.gpu.limits import Limits
from tandem.models.arch import ModelArch
from tandem.models.memory import count_parameters, kv_bytes_per_token


@dataclass(frozen=True)
class ModelCost:
    weight_bytes: int            # read by every step: all but the embedding and the routed experts
    expert_bytes: int            # all routed experts, all layers
    expert_fraction: float       # k / E (0 for a dense model)
    flops_per_token: float       # matmuls a token passes through (routed experts at k / E)
    kv_bytes_per_token: int      # all layers
    decode_attn_flops: float     # per query per context token, all layers
    prefill_attn_flops: float

    @classmethod
    def of(cls, arch: ModelArch, dtype: torch.dtype) -> "ModelCost":
        size = torch.empty((), dtype=dtype).element_size()
        total, active = count_parameters(arch)
        embed = arch.vocab_size * arch.hidden_size
        moe = arch.moe
        experts = 0 if moe is None else sum(
            3 * arch.hidden_size * moe.expert_intermediate_size * moe.num_experts
            for layer in range(arch.num_layers) if moe.is_moe_layer(layer))
        H, L = arch.num_heads, arch.num_layers
        if arch.mla is not None:
            m = arch.mla
            decode = L * (2 * H * (m.kv_lora_rank + m.qk_rope_head_dim) + 2 * H * m.kv_lora_rank)
            prefill = L * (2 * H * m.qk_head_dim + 2 * H * m.v_head_dim)
        else:
            decode = prefill = L * 4 * H * arch.head_dim
        return cls(weight_bytes=(total - embed - experts) * size, expert_bytes=experts * size,
                   expert_fraction=0.0 if moe is None else moe.top_k / moe.num_experts,
                   flops_per_token=2.0 * (active - embed), kv_bytes_per_token=kv_bytes_per_token(arch, dtype),
                   decode_attn_flops=float(decode), prefill_attn_flops=float(prefill))

    def touched_expert_bytes(self, tokens: int) -> float:
        return self.expert_bytes * (1.0 - (1.0 - self.expert_fraction) ** tokens)


def decode_bound(cost: ModelCost, limits: Limits, batch: int, context: int) -> float:
    """Seconds of one decode step of `batch` sequences, each over `context` cached tokens."""
    read = cost.weight_bytes + cost.touched_expert_bytes(batch) + batch * context * cost.kv_bytes_per_token
    flops = batch * cost.flops_per_token + batch * context * cost.decode_attn_flops
    return max(read / limits.copy_bytes_per_s, flops / limits.matmul_flops)


def prefill_bound(cost: ModelCost, limits: Limits, chunk: int) -> float:
    """Seconds of a prefill chunk of `chunk` tokens from an empty context (causal attention)."""
    read = cost.weight_bytes + cost.touched_expert_bytes(chunk) + chunk * cost.kv_bytes_per_token
    flops = chunk * cost.flops_per_token + chunk * (chunk + 1) / 2 * cost.prefill_attn_flops
    return max(read / limits.copy_bytes_per_s, flops / limits.matmul_flops)
