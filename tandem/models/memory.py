"""How much memory a checkpoint needs, from its config alone (no weight read), and a clear
error before loading when it cannot fit.

The parameter count is computed from the architecture (tests check it against the built
model's parameters); weights take count x bytes of the dtype they are served in. The KV cache
needs `kv_bytes_per_token` per token of context (all layers), on top of the weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from tandem.errors import ModelLoadError
from tandem.models.arch import ModelArch

_GIB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    architecture: str
    num_params: int
    num_active_params: int        # per token: dense parts plus top_k routed (and shared) experts
    dtype: torch.dtype
    weight_bytes: int
    kv_bytes_per_token: int       # the KV cache per token of context, all layers
    num_ranks: int = 1            # tensor x pipeline parallel ranks sharing the weights

    @property
    def weight_bytes_per_rank(self) -> int:
        return -(-self.weight_bytes // self.num_ranks)

    def describe(self) -> str:
        dt = str(self.dtype).removeprefix("torch.")
        per = f", {self.weight_bytes_per_rank / _GIB:.1f} GiB per rank over {self.num_ranks}" \
            if self.num_ranks > 1 else ""
        return (f"{self.architecture}: {self.num_params / 1e9:.2f}B parameters "
                f"({self.num_active_params / 1e9:.2f}B active per token), {self.weight_bytes / _GIB:.1f} GiB "
                f"of weights in {dt}{per}; KV cache {self.kv_bytes_per_token / 1024:.1f} KiB per token")


def count_parameters(arch: ModelArch) -> tuple[int, int]:
    """(all parameters, parameters one token goes through)."""
    h, v = arch.hidden_size, arch.vocab_size
    total = v * h + h + (0 if arch.tie_word_embeddings else v * h)    # embeddings, final norm, lm_head
    active = total
    for layer in range(arch.num_layers):
        common = 2 * h + _attention_params(arch)
        moe = arch.moe
        if moe is None or not moe.is_moe_layer(layer):
            mlp_total = mlp_active = 3 * h * arch.intermediate_size + (
                2 * arch.intermediate_size + h if arch.mlp_bias else 0)
        else:
            expert = 3 * h * moe.expert_intermediate_size
            router = moe.num_experts * h + (moe.num_experts if moe.correction_bias else 0)
            shared = expert * moe.num_shared_experts
            mlp_total = router + expert * moe.num_experts + shared
            mlp_active = router + expert * moe.top_k + shared
        total += common + mlp_total
        active += common + mlp_active
    return total, active


def _attention_params(arch: ModelArch) -> int:
    h, H = arch.hidden_size, arch.num_heads
    m = arch.mla
    if m is not None:
        bias = arch.attention_bias
        q = (h * H * m.qk_head_dim if m.q_lora_rank is None else
             h * m.q_lora_rank + (m.q_lora_rank if bias else 0) + m.q_lora_rank + m.q_lora_rank * H * m.qk_head_dim)
        kv = h * m.latent_dim + (m.latent_dim if bias else 0) + m.kv_lora_rank \
            + m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + H * m.v_head_dim * h + (h if bias else 0)
    d, kvh = arch.head_dim, arch.num_kv_heads
    n = h * H * d + 2 * h * kvh * d + H * d * h
    if arch.attention_bias or arch.model_type == "qwen2":
        n += H * d + 2 * kvh * d                    # q/k/v biases
    if arch.attention_bias and arch.model_type != "qwen2":
        n += h                                      # o_proj bias (Llama's attention_bias)
    if arch.model_type in ("qwen3", "qwen3_moe"):
        n += 2 * d                                  # q_norm, k_norm
    return n


def kv_bytes_per_token(arch: ModelArch, dtype: torch.dtype) -> int:
    """Cache bytes per token over all layers: keys and values per KV head, or MLA's one latent."""
    parts = 1 if arch.kv_kind == "mla" else 2
    return arch.num_layers * parts * arch.kv_heads_cached * arch.kv_dim_cached * torch.empty((), dtype=dtype).element_size()


def estimate_memory(arch: ModelArch, dtype: torch.dtype, num_ranks: int = 1) -> MemoryEstimate:
    total, active = count_parameters(arch)
    size = torch.empty((), dtype=dtype).element_size()
    return MemoryEstimate(arch.architecture, total, active, dtype, total * size,
                          kv_bytes_per_token(arch, dtype), num_ranks)


def device_memory(device: torch.device) -> int:
    """Bytes a model can use on `device`: free GPU memory, or the machine's RAM on the CPU (where
    weights are memory-mapped, so free RAM is not the limit, the total is)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(est: MemoryEstimate, device: torch.device, available: int | None = None) -> None:
    """Raise ModelLoadError, with the estimate, when one rank's weights exceed `available`
    (default: device_memory(device))."""
    have = device_memory(device) if available is None else available
    if est.weight_bytes_per_rank > have:
        need_ranks = -(-est.weight_bytes // have)
        raise ModelLoadError(
            f"the model does not fit: {est.describe()}; {device} has {have / _GIB:.1f} GiB. "
            f"Spread it over at least {need_ranks} devices (--tensor-parallel-size / "
            f"--pipeline-parallel-size), or serve a smaller or quantized variant")
