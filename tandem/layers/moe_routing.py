"""Top-k expert routing: router logits -> each token's experts and their weights (pure function).

The choice: scores (softmax or sigmoid of the logits), plus the correction bias when the model
has one; with groups, only experts of the `topk_groups` best groups (a group scores the sum of
its two best choice scores) are eligible; then the `top_k` best eligible experts. The weights:
the chosen experts' scores without the bias, renormalized when asked, times the scaling factor.

Ties are broken as torch.topk breaks them, as transformers does (so that outputs match it): a
row's choice depends only on that row's scores, never on the other tokens of the batch, and every
rank of a parallel worker computes the same choice from the same scores. Exactly `top_k` distinct
experts are chosen per token, none from an ineligible group.
"""

from __future__ import annotations

import torch

from tandem.layers.moe_spec import MoESpec


def route(logits: torch.Tensor, spec: MoESpec,
          correction_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (weights [T, k] float32, expert ids LongTensor[T, k])."""
    logits = logits.float()
    scores = logits.softmax(dim=-1) if spec.scoring == "softmax" else logits.sigmoid()   # [T, E]
    choice = scores if correction_bias is None else scores + correction_bias.float()
    if spec.num_groups > 1:
        choice = _mask_groups(choice, spec.num_groups, spec.topk_groups)
    ids = torch.topk(choice, spec.top_k, dim=-1).indices                                  # [T, k]
    weights = scores.gather(1, ids)                                                       # [T, k]
    if spec.normalize:
        # sigmoid scores may all be tiny: DeepSeek's denominator carries an epsilon
        eps = 1e-20 if spec.scoring == "sigmoid" else 0.0
        weights = weights / (weights.sum(dim=-1, keepdim=True) + eps)
    if spec.scaling != 1.0:
        weights = weights * spec.scaling
    return weights, ids


def _mask_groups(choice: torch.Tensor, num_groups: int, topk_groups: int) -> torch.Tensor:
    """choice [T, E] with the experts outside each token's best `topk_groups` groups set to -inf."""
    T, E = choice.shape
    grouped = choice.view(T, num_groups, E // num_groups)                       # [T, G, E/G]
    group_scores = grouped.topk(min(2, E // num_groups), dim=-1).values.sum(dim=-1)  # [T, G]
    best = torch.topk(group_scores, topk_groups, dim=-1).indices                # [T, topk_groups]
    keep = torch.zeros(T, num_groups, dtype=torch.bool, device=choice.device).scatter_(1, best, True)
    return grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(T, E)
