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

A grouped-GEMM kernel (`use_kernel`, tandem.kernels.triton.fused_moe on a GPU) replaces the loop
over experts: the experts' weights are stacked once (w13 [E_local, 2I, hidden], w2 [E_local,
hidden, I]) and each expert's Linear weights become views into the stacks (no second copy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import torch
from torch import nn

from tandem.layers.mlp import GatedMLP
from tandem.layers.moe_routing import route
from tandem.layers.moe_spec import MoESpec


class MoEKernel(Protocol):
    graph_safe: bool   # no host synchronisation: a CUDA graph can replay it

    def supports(self, x: torch.Tensor, w13: torch.Tensor) -> bool: ...

    def __call__(self, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
                 expert_ids: torch.Tensor) -> torch.Tensor:
        """x [T, hidden], weights [T, k] float32, expert_ids [T, k] (stack indices, -1 skips) -> [T, hidden]."""
        ...


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
        # grouped-GEMM kernel over the stacked weights (use_kernel); None: the loop over experts
        self.kernel: MoEKernel | None = None
        self.w13: torch.Tensor | None = None           # [E_local, 2I, hidden]
        self.w2: torch.Tensor | None = None            # [E_local, hidden, I]
        self.stack_index: torch.Tensor | None = None   # LongTensor[num_experts]: stack row, -1 elsewhere

    def use_kernel(self, kernel: MoEKernel) -> None:
        """Stack the local experts' weights for `kernel` and make each expert's Linear weights
        views into the stacks. Call after the weights are loaded, before serving."""
        experts = [(int(e), m) for e, m in self.experts.items()]
        w13 = torch.stack([torch.cat((m.gate_proj.weight, m.up_proj.weight)) for _, m in experts])
        w2 = torch.stack([m.down_proj.weight for _, m in experts])
        inter = w2.shape[2]
        for i, (_, m) in enumerate(experts):
            m.gate_proj.weight = nn.Parameter(w13[i, :inter], requires_grad=False)
            m.up_proj.weight = nn.Parameter(w13[i, inter:], requires_grad=False)
            m.down_proj.weight = nn.Parameter(w2[i], requires_grad=False)
        index = torch.full((self.spec.num_experts,), -1, dtype=torch.long)
        index[[e for e, _ in experts]] = torch.arange(len(experts))
        self.kernel, self.w13, self.w2, self.stack_index = kernel, w13, w2, index.to(w13.device)

    def _kernel_ready(self, x: torch.Tensor) -> bool:
        return self.kernel is not None and self.kernel.supports(x, self.w13)

    def expert_rows(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        # x [m, hidden], ids [m] (experts of this rank) -> [m, hidden]: row i through expert ids[i],
        # unweighted; experts in ascending id order
        if self._kernel_ready(x):
            ones = torch.ones(ids.shape[0], 1, dtype=torch.float32, device=x.device)
            return self.kernel(x, self.w13, self.w2, ones, self.stack_index[ids].unsqueeze(1))
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
        if self._kernel_ready(x):
            out = self.kernel(x, self.w13, self.w2, weights.float(), self.stack_index[ids])
            return self._finish(x, out)
        out = torch.zeros_like(x)
        # experts in ascending id order, as transformers sums them; a token meets an expert once
        for e in torch.unique(ids).tolist():
            expert = self.experts[str(e)] if str(e) in self.experts else None
            if expert is None:
                continue                                                # another rank's expert
            tokens, slot = torch.where(ids == e)                        # [n], [n]
            y = expert(x.index_select(0, tokens)) * weights[tokens, slot].unsqueeze(1)
            out.index_add_(0, tokens, y.to(x.dtype))
        return self._finish(x, out)

    def _finish(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        # the routed experts' sum [T, hidden] + the shared experts, summed over the ranks
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return self.reduce(out) if self.reduce is not None else out

