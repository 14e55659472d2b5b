"""MoE routing: grouped top-k, the correction bias, renormalization and scaling, ties."""

from __future__ import annotations

import math

import torch

from tandem.layers.moe_routing import route
from tandem.layers.moe_spec import MoESpec

torch.set_num_threads(1)

DEEPSEEK = MoESpec(num_experts=8, top_k=2, expert_intermediate_size=4, scoring="sigmoid", normalize=True,
                   router_float32=True, num_groups=4, topk_groups=2, scaling=2.5, correction_bias=True)


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_softmax_top_k_renormalized():
    spec = MoESpec(num_experts=4, top_k=2, expert_intermediate_size=4)
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0]])
    w, ids = route(logits, spec)
    assert sorted(ids[0].tolist()) == [1, 2]
    p = logits.softmax(-1)[0]
    want = {1: p[1] / (p[1] + p[2]), 2: p[2] / (p[1] + p[2])}
    for e, wt in zip(ids[0].tolist(), w[0]):
        assert torch.isclose(wt, want[e])
    assert w.dtype == torch.float32


def test_softmax_without_renormalization_keeps_probabilities():
    spec = MoESpec(num_experts=4, top_k=2, expert_intermediate_size=4, normalize=False)
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0]])
    w, ids = route(logits, spec)
    torch.testing.assert_close(w[0], logits.softmax(-1)[0][ids[0]])


def test_groups_limit_the_choice_to_the_best_groups():
    # groups {0,1} {2,3} {4,5} {6,7}; group score = sum of its two best
    p = [0.9, 0.1, 0.6, 0.6, 0.95, 0.05, 0.5, 0.5]   # sums 1.0, 1.2, 1.0, 1.0
    logits = torch.tensor([[logit(x) for x in p]])
    w, ids = route(logits, DEEPSEEK, torch.zeros(8))
    # the best expert overall (4, 0.95) lies in a group that is not among the best two: group
    # {2,3} (1.2) first, then a tie between {0,1}, {4,5} and {6,7} at 1.0 broken by torch.topk
    chosen = set(ids[0].tolist())
    assert len(chosen) == 2 and {2, 3} & chosen
    groups = {e // 2 for e in chosen}
    assert 1 in groups and len(groups) <= 2


def test_a_group_with_one_strong_expert_loses_to_a_group_of_two_good_ones():
    p = [0.99, 0.01, 0.7, 0.7, 0.1, 0.1, 0.1, 0.1]     # group sums 1.00, 1.40, 0.2, 0.2
    logits = torch.tensor([[logit(x) for x in p]])
    spec = MoESpec(**{**DEEPSEEK.__dict__, "topk_groups": 1})
    w, ids = route(logits, spec, torch.zeros(8))
    assert sorted(ids[0].tolist()) == [2, 3]          # expert 0 (0.99) is not eligible


def test_correction_bias_changes_the_choice_but_not_the_weights():
    p = [0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]
    logits = torch.tensor([[logit(x) for x in p]])
    spec = MoESpec(num_experts=8, top_k=2, expert_intermediate_size=4, scoring="sigmoid",
                   scaling=2.0, correction_bias=True)
    bias = torch.zeros(8)
    bias[7] = 1.0                                      # expert 7: 0.1 + 1.0 beats everyone
    w, ids = route(logits, spec, bias)
    assert sorted(ids[0].tolist()) == [0, 7]
    by_id = dict(zip(ids[0].tolist(), w[0].tolist()))
    # weights are the raw sigmoid scores (0.8, 0.1), renormalized, times the scaling factor
    assert math.isclose(by_id[0], 2.0 * 0.8 / 0.9, rel_tol=1e-5)
    assert math.isclose(by_id[7], 2.0 * 0.1 / 0.9, rel_tol=1e-5)


def test_ties_give_k_distinct_experts_independent_of_the_batch():
    spec = MoESpec(num_experts=8, top_k=3, expert_intermediate_size=4)
    tied = torch.zeros(1, 8)                            # every expert equal
    w, ids = route(tied, spec)
    assert len(set(ids[0].tolist())) == 3
    torch.testing.assert_close(w, torch.full((1, 3), 1 / 3))
    # the same row routes the same way alone and among other rows, on every call
    others = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    batch = torch.cat([others[:2], tied, others[2:]])
    w2, ids2 = route(batch, spec)
    assert ids2[2].tolist() == ids[0].tolist()
    assert route(batch, spec)[1].tolist() == ids2.tolist()


def test_tied_groups_never_admit_a_masked_expert():
    spec = MoESpec(num_experts=8, top_k=4, expert_intermediate_size=4, scoring="sigmoid",
                   num_groups=4, topk_groups=2, correction_bias=True)
    logits = torch.zeros(3, 8)                         # all groups tie
    w, ids = route(logits, spec, torch.zeros(8))
    for row in ids.tolist():
        assert len(set(row)) == 4
        assert len({e // 2 for e in row}) == 2         # exactly the experts of two whole groups


def test_grouped_routing_matches_a_brute_force_reference():
    gen = torch.Generator().manual_seed(1)
    spec = MoESpec(num_experts=16, top_k=4, expert_intermediate_size=4, scoring="sigmoid", num_groups=4,
                   topk_groups=2, scaling=1.5, correction_bias=True)
    logits = torch.randn(50, 16, generator=gen)
    bias = 0.3 * torch.randn(16, generator=gen)
    w, ids = route(logits, spec, bias)
    scores = logits.sigmoid()
    for t in range(50):
        choice = scores[t] + bias
        group_score = [sorted(choice[g * 4:(g + 1) * 4].tolist())[-2:] for g in range(4)]
        best_groups = sorted(range(4), key=lambda g: -sum(group_score[g]))[:2]
        eligible = [e for e in range(16) if e // 4 in best_groups]
        want = sorted(sorted(eligible, key=lambda e: -choice[e].item())[:4])
        assert sorted(ids[t].tolist()) == want
        raw = scores[t, ids[t]]
        torch.testing.assert_close(w[t], 1.5 * raw / raw.sum())
