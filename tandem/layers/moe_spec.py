"""MoESpec: how a mixture-of-experts layer routes tokens and combines its experts (see
tandem/models/arch_specs.py for each family's values and tandem/layers/moe_routing.py for the
routing itself)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoESpec:
    num_experts: int
    top_k: int
    expert_intermediate_size: int
    scoring: str = "softmax"            # softmax | sigmoid
    normalize: bool = True              # renormalize the chosen experts' weights to sum 1
    weights_float32: bool = True        # routing weights scale expert outputs in float32 (else model dtype)
    router_float32: bool = False        # router logits from float32 hidden states and weights
    num_groups: int = 1                 # grouped top-k: experts in num_groups equal groups ...
    topk_groups: int = 1                # ... of which the best topk_groups are eligible
    scaling: float = 1.0                # routed_scaling_factor
    correction_bias: bool = False       # e_score_correction_bias added to the scores for the choice only
    num_shared_experts: int = 0         # always-on experts, one MLP of num_shared * expert size
    dense_layers: frozenset[int] = frozenset()  # layers with a dense MLP (intermediate_size)

    def is_moe_layer(self, layer: int) -> bool:
        return layer not in self.dense_layers
