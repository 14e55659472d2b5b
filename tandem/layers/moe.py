"""Sparse mixture-of-experts MLP: a router picks `top_k` experts per token (tandem/layers/moe_routing.py),
each expert (a gated SiLU MLP) runs on its tokens only, and their outputs, scaled by the routing
weights, are summed per token; shared experts (DeepSeek) run on every token and are added.

Parameter names follow the checkpoints': `gate.weight` [E, hidden] (and
`gate.e_score_correction_bias` [E]), `experts.<e>.{gate,up,down}_proj.weight`,
`shared_experts.{gate,up,down}_proj.weight`.

Expert parallelism: `experts` holds only this rank's experts (a ModuleDict keyed by expert id).
Either every rank routes all tokens the same way, computes its experts' share and `reduce` (an
all-reduce over the ranks; None alone) sums the shares; or `dispatch` (tandem.parallel's
all-to-all) replaces the whole forward: each rank routes its slice of the tokens, sends each
choice to the rank of its expert, which runs `expert_rows` on what it received and sends the
outputs back to be combined. Tensor parallelism shards each expert's intermediate dimension
instead, and the same `reduce` sums the partial products.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from tandem.layers.mlp import GatedMLP
from tandem.layers.moe_routing import route
from tandem.layers.moe_spec import MoESpec


class Router(nn.Module):
    # weight [E, hidden]; e_score_correction_bias [E] (kept in float32 by the loader) when the spec has one
    def __init__(self, hidden: int, spec: MoESpec) -> None:
        super().__init__()
        self.spec = spec
        self.weight = nn.Parameter(torch.empty(spec.num_experts, hidden), requires_grad=False)
        self.e_score_correction_bias = (nn.Parameter(torch.empty(spec.num_experts), requires_grad=False)
                                        if spec.correction_bias else None)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x [T, hidden] -> (weights [T, k] float32, expert ids [T, k])
        if self.spec.router_float32:
            logits = torch.nn.functional.linear(x.float(), self.weight.float())
        else:
            logits = torch.nn.functional.linear(x, self.weight)
        return route(logits, self.spec, self.e_score_correction_bias)


class SparseMoE(nn.Module):
    def __init__(self, hidden: int, spec: MoESpec, local_experts: Iterable[int] | None = None,
                 intermediate_shards: int = 1) -> None:
        """`local_experts`: the expert ids this rank holds (None: all); `intermediate_shards`:
        tensor-parallel ranks splitting each expert's intermediate dimension."""
        super().__init__()
        self.spec = spec
        size = spec.expert_intermediate_size // intermediate_shards
        ids = range(spec.num_experts) if local_experts is None else sorted(local_experts)
        self.gate = Router(hidden, spec)
        self.experts = nn.ModuleDict({str(e): GatedMLP(hidden, size) for e in ids})
        self.shared_experts = (GatedMLP(hidden, spec.expert_intermediate_size * spec.num_shared_experts
                                        // intermediate_shards)
                               if spec.num_shared_experts else None)
        # sums the ranks' partial outputs (set by tandem.parallel); None: this rank holds everything
        self.reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
        # expert parallel with all-to-all token dispatch (set by tandem.parallel): the whole forward
        self.dispatch: Callable[["SparseMoE", torch.Tensor], torch.Tensor] | None = None

    def expert_rows(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        # x [m, hidden], ids [m] (experts of this rank) -> [m, hidden]: row i through expert ids[i],
        # unweighted; experts in ascending id order
        out = torch.empty_like(x)
        for e in torch.unique(ids).tolist():
            rows = torch.where(ids == e)[0]
            out.index_copy_(0, rows, self.experts[str(e)](x.index_select(0, rows)))
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x [T, hidden] -> [T, hidden]
        if self.dispatch is not None:
            return self.dispatch(self, x)
        weights, ids = self.gate(x)                                     # [T, k] float32, [T, k]
        if not self.spec.weights_float32:
            weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        # experts in ascending id order, as transformers sums them; a token meets an expert once
        for e in torch.unique(ids).tolist():
            expert = self.experts[str(e)] if str(e) in self.experts else None
            if expert is None:
                continue                                                # another rank's expert
            tokens, slot = torch.where(ids == e)                        # [n], [n]
            y = expert(x.index_select(0, tokens)) * weights[tokens, slot].unsqueeze(1)
            out.index_add_(0, tokens, y.to(x.dtype))
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return self.reduce(out) if self.reduce is not None else out

