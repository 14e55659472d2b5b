import dataclasses
import math

import pytest
import torch

from tandem.runner.sampler import (Sampler, SamplingRow, apply_penalties, apply_top_k_top_p,
                                   make_generator)
from tandem.types import SamplingParams

torch.set_num_threads(1)

VOCAB = 64


def row(**kw) -> SamplingRow:
    fields = {k: kw.pop(k) for k in ("output_token_ids", "prompt_token_ids", "generator",
                                       "eos_token_ids") if k in kw}
    return SamplingRow(params=SamplingParams(**kw), **fields)


def seeded(seed: int, **kw) -> SamplingRow:
    return row(seed=seed, generator=make_generator(seed, "cpu"), **kw)


def test_greedy_equals_argmax_and_input_untouched():
    torch.manual_seed(0)
    logits = torch.randn(6, VOCAB)
    before = logits.clone()
    rows = [row(temperature=0.0), row(temperature=1.0), row(temperature=0.0),
            row(temperature=0.0, top_p=0.5), row(temperature=0.7, top_k=5), row(temperature=0.0)]
    out = Sampler().sample(logits, rows)
    argmax = logits.argmax(dim=-1).tolist()
    for i in (0, 2, 3, 5):
        assert out.token_ids[i] == argmax[i]
    assert torch.equal(logits, before)
    assert out.logprobs == [None] * 6


def _run_steps(logits_seq, rows_at_step, target):
    """Sample each step's batch; return the token of row `target` at every step."""
    sampler = Sampler()
    return [sampler.sample(logits, rows).token_ids[target(rows)]
            for logits, rows in zip(logits_seq, rows_at_step)]


def test_seeded_sampling_reproducible_and_independent_of_batch():
    torch.manual_seed(1)
    steps = [torch.randn(1, VOCAB) for _ in range(30)]
    noise = [torch.randn(4, VOCAB) for _ in range(30)]
    kw = dict(temperature=1.3, top_p=0.95, top_k=40, min_p=0.01)

    def alone():
        me = seeded(1234, **kw)
        return [Sampler().sample(s, [me]).token_ids[0] for s in steps]

    def in_batch(position: int, other_seed: int):
        me = seeded(1234, **kw)
        others = [seeded(other_seed, temperature=0.9), row(temperature=1.0),
                  row(temperature=0.0), seeded(other_seed + 1, top_k=3)]
        got = []
        for s, nz in zip(steps, noise):
            batch = list(others)
            batch.insert(position, me)
            logits = torch.cat([nz[:position], s, nz[position:]])
            got.append(Sampler().sample(logits, batch).token_ids[position])
        return got

    ref = alone()
    assert alone() == ref
    assert in_batch(0, 7) == ref
    assert in_batch(4, 99) == ref
    assert in_batch(2, 5) == ref
    # A different seed gives a different sequence (30 tokens from a ~flat distribution).
    other = [Sampler().sample(s, [seeded(4321, **kw)]).token_ids[0] for s in steps]
    assert other != ref
    # Not degenerate: the sequence is not just the argmax.
    assert ref != [int(s.argmax()) for s in steps]


def test_top_k_one_and_tiny_top_p_equal_greedy():
    torch.manual_seed(2)
    logits = torch.randn(32, VOCAB) * 3
    argmax = logits.argmax(dim=-1).tolist()
    out_k = Sampler().sample(logits, [row(temperature=1.5, top_k=1) for _ in range(32)])
    out_p = Sampler().sample(logits, [seeded(i, temperature=1.5, top_p=1e-6) for i in range(32)])
    assert out_k.token_ids == argmax
    assert out_p.token_ids == argmax


def _frequencies(logits_row: torch.Tensor, n: int, **kw) -> list[float]:
    torch.manual_seed(3)
    logits = logits_row.expand(n, -1).contiguous()
    tokens = Sampler().sample(logits, [row(**kw) for _ in range(n)]).token_ids
    return [tokens.count(t) / n for t in range(logits.shape[1])]


PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


@pytest.mark.parametrize("temperature", [1.0, 0.5, 1.7])
def test_temperature_distribution(temperature):
    n = 6000
    freq = _frequencies(PROBS.log(), n, temperature=temperature)
    expected = PROBS ** (1.0 / temperature)
    expected = (expected / expected.sum()).tolist()
    for f, e in zip(freq, expected):
        assert abs(f - e) < 5 * math.sqrt(e * (1 - e) / n) + 1e-3, (freq, expected)


def test_top_k_and_top_p_truncate_distribution():
    n = 4000
    freq = _frequencies(PROBS.log(), n, top_k=2)
    assert freq[2] == freq[3] == 0.0
    assert abs(freq[0] - 0.5 / 0.8) < 0.04
    # top_p=0.7: tokens 0 and 1 carry 0.8 >= 0.7, token 2 is dropped.
    freq = _frequencies(PROBS.log(), n, top_p=0.7)
    assert freq[2] == freq[3] == 0.0 and freq[1] > 0.3
    # top_p=0.4: the top token alone reaches it.
    assert _frequencies(PROBS.log(), 200, top_p=0.4)[0] == 1.0


def test_min_p():
    n = 4000
    # min_p=0.35: threshold 0.175; tokens 2 (0.15) and 3 (0.05) are dropped.
    freq = _frequencies(PROBS.log(), n, min_p=0.35)
    assert freq[2] == freq[3] == 0.0
    assert abs(freq[0] - 0.5 / 0.8) < 0.04
    # min_p=0.25: threshold 0.125 keeps token 2, still drops token 3.
    freq = _frequencies(PROBS.log(), n, min_p=0.25)
    assert freq[2] > 0.1 and freq[3] == 0.0


def test_penalties_follow_formula_exactly():
    logits = torch.tensor([[2.0, -1.0, 0.5, -0.5, 3.0, 0.0, 1.0]])
    r = row(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25,
            prompt_token_ids=[0, 1, 5], output_token_ids=[2, 2, 3])
    got = apply_penalties(logits.clone(), [r])
    # repetition over prompt+output {0,1,2,3,5}: positive / 2, negative * 2 (0 stays 0);
    # then output counts {2: 2, 3: 1}: - 0.5 * count - 0.25 * present.
    expected = torch.tensor([[1.0, -2.0, 0.25 - 1.0 - 0.25, -1.0 - 0.5 - 0.25, 3.0, 0.0, 1.0]])
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_penalties_per_row_and_change_greedy_choice():
    logits = torch.tensor([[2.0, 1.9, 0.0], [2.0, 1.9, 0.0], [2.0, 1.9, 0.0]])
    rows = [row(temperature=0.0, presence_penalty=0.2, output_token_ids=[0]),
            row(temperature=0.0, output_token_ids=[0]),                  # no penalty
            row(temperature=0.0, repetition_penalty=1.1, prompt_token_ids=[0])]
    assert Sampler().sample(logits, rows).token_ids == [1, 0, 1]
    # Only penalised rows change.
    got = apply_penalties(logits.clone(), rows)
    torch.testing.assert_close(got[1], logits[1])
    torch.testing.assert_close(got[0], torch.tensor([1.8, 1.9, 0.0]))
    torch.testing.assert_close(got[2], torch.tensor([2.0 / 1.1, 1.9, 0.0]))


def test_logit_bias_is_added_per_row_after_penalties():
    logits = torch.tensor([[2.0, 1.9, 0.0], [2.0, 1.9, 0.0], [2.0, 1.9, 0.0]])
    rows = [row(temperature=0.0, logit_bias=((2, 100.0),)),           # forces token 2
            row(temperature=0.0, logit_bias=((0, -100.0), (1, -0.5))),  # -98, 1.4, 0: token 1
            row(temperature=0.0)]                                     # untouched
    assert Sampler().sample(logits, rows).token_ids == [2, 1, 0]
    # a penalised token can be brought back by a bias: presence 2 then +0.3
    r = row(temperature=0.0, presence_penalty=2.0, output_token_ids=[0], logit_bias=((0, 0.3),))
    assert Sampler().sample(logits[:1], [r]).token_ids == [1]      # 2 - 2 + 0.3 = 0.3 < 1.9
    r = row(temperature=0.0, presence_penalty=2.0, output_token_ids=[0], logit_bias=((0, 2.0),))
    assert Sampler().sample(logits[:1], [r]).token_ids == [0]      # 2 - 2 + 2 = 2 > 1.9
    # random rows never pick a token biased by -100, and logprobs stay raw
    torch.manual_seed(5)
    rows = [row(logit_bias=((0, -100.0), (1, -100.0)), logprobs=1) for _ in range(200)]
    out = Sampler().sample(logits[:1].expand(200, -1), rows)
    assert set(out.token_ids) == {2}
    torch.testing.assert_close(out.logprobs[0].logprob, torch.log_softmax(logits[0], -1)[2].item())


def test_min_tokens_masks_eos_and_stop_tokens():
    logits = torch.tensor([[0.0, 1.0, 5.0, 4.0, 3.0]])  # EOS = 2 is the argmax, 3 a stop token
    def pick(n_out: int, **kw) -> int:
        r = row(temperature=0.0, min_tokens=3, max_tokens=10, stop_token_ids=(3,),
                output_token_ids=[1] * n_out, eos_token_ids=(2,), **kw)
        return Sampler().sample(logits, [r]).token_ids[0]
    assert pick(0) == 4
    assert pick(2) == 4
    assert pick(3) == 2
    # ignore_eos: EOS does not stop the request, so it is not banned; stop tokens still are.
    assert pick(0, ignore_eos=True) == 2
    # Random sampling never picks a banned token either.
    torch.manual_seed(4)
    rows = [row(min_tokens=1, stop_token_ids=(3,), eos_token_ids=(2,)) for _ in range(500)]
    tokens = Sampler().sample(logits.expand(500, -1), rows).token_ids
    assert 2 not in tokens and 3 not in tokens


def test_logprobs_are_raw_log_softmax_with_sorted_top():
    torch.manual_seed(5)
    logits = torch.randn(4, VOCAB) * 2
    rows = [row(temperature=0.5, logprobs=5, repetition_penalty=1.5, output_token_ids=[1, 2]),
            row(temperature=0.0, logprobs=0),
            row(temperature=1.0),
            seeded(3, logprobs=20, top_k=3)]
    out = Sampler().sample(logits, rows)
    ref = torch.log_softmax(logits, dim=-1)
    assert out.logprobs[2] is None
    for i, k in ((0, 5), (1, 0), (3, 20)):
        lp = out.logprobs[i]
        assert lp.token_id == out.token_ids[i]
        assert lp.logprob == pytest.approx(ref[i, lp.token_id].item(), abs=1e-6)
        assert len(lp.top) == k
        vals = [v for _, v in lp.top]
        assert vals == sorted(vals, reverse=True)
        best = ref[i].topk(k).indices.tolist() if k else []
        assert [t for t, _ in lp.top] == best
        for t, v in lp.top:
            assert v == pytest.approx(ref[i, t].item(), abs=1e-6)
    assert out.logprobs[1].logprob == pytest.approx(ref[1].max().item(), abs=1e-6)


def test_rejects_mismatched_rows():
    with pytest.raises(ValueError):
        Sampler().sample(torch.zeros(2, 4), [row()])


def _reference_keep(logits_row: torch.Tensor, top_k: int, top_p: float) -> set[int]:
    """Plain full-sort top-k then top-p, written independently of the sampler."""
    order = logits_row.argsort(descending=True).tolist()
    if top_k:
        order = order[:top_k]
    probs = torch.softmax(logits_row[order].double(), dim=0).tolist()
    kept, mass = [], 0.0
    for tok, pr in zip(order, probs):
        if top_p < 1.0 and mass >= top_p:
            break
        kept.append(tok)
        mass += pr
    return set(kept)


def test_top_k_top_p_candidate_path_and_fallback_match_full_sort():
    # vocab large enough for the top-candidates fast path; flat rows need the full-sort fallback.
    torch.manual_seed(6)
    vocab = 8192
    logits = torch.cat([torch.randn(3, vocab) * 6, torch.randn(4, vocab) * 0.05])  # peaked, flat
    # (100, 0.5) on a flat row: top-p must be relative to the mass top-k kept (~half of 100).
    cases = [(0, 0.8), (20, 1.0), (2000, 0.5), (0, 0.8), (7, 0.9), (0, 0.3), (100, 0.5)]
    got = apply_top_k_top_p(logits.clone(), [k for k, _ in cases], [p for _, p in cases])
    for i, (k, p) in enumerate(cases):
        kept = set(torch.isfinite(got[i]).nonzero().squeeze(1).tolist())
        ref = _reference_keep(logits[i], k, p)
        # Float rounding may move the cut by one token at most.
        assert len(kept ^ ref) <= 1, (i, len(kept), len(ref))
        assert len(kept) >= 1
        torch.testing.assert_close(got[i][list(kept)], logits[i][list(kept)])
    # Each row alone gives the same result as in the batch (paths differ, results do not).
    for i, (k, p) in enumerate(cases):
        alone = apply_top_k_top_p(logits[i:i + 1].clone(), [k], [p])
        assert torch.equal(alone[0], got[i])


def test_sampled_tokens_stay_in_kept_set_large_vocab():
    torch.manual_seed(7)
    vocab = 8192
    logits = torch.randn(1, vocab) * 3
    ref = _reference_keep(logits[0], 0, 0.6)
    assert 3 <= len(ref) < 1024  # the fast path, with several kept tokens
    rows = [seeded(i, top_p=0.6) for i in range(200)]
    tokens = Sampler().sample(logits.expand(200, -1), rows).token_ids
    assert set(tokens) <= ref
    assert len(set(tokens)) > 1


def _naive_penalties(logits, r):
    """Reference: the formulas over the whole vocabulary, one row."""
    p = r.params
    out = logits.clone()
    seen = set(r.prompt_token_ids) | set(r.output_token_ids)
    for t in seen:
        if p.repetition_penalty != 1.0:
            v = out[t]
            out[t] = v / p.repetition_penalty if v > 0 else v * p.repetition_penalty
    for t in set(r.output_token_ids):
        out[t] = out[t] - p.frequency_penalty * r.output_token_ids.count(t) - p.presence_penalty
    return out


def test_penalties_touch_only_seen_tokens_with_or_without_cached_prompt_ids():
    from tandem.runner.sampler import distinct_ids

    g = torch.Generator().manual_seed(3)
    vocab = 5000
    rows = [row(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.2,
                prompt_token_ids=torch.randint(0, vocab, (300,), generator=g).tolist(),
                output_token_ids=torch.randint(0, vocab, (40,), generator=g).tolist()),
            row(repetition_penalty=0.8, prompt_token_ids=[1, 1, 2]),            # no output yet
            row(frequency_penalty=-0.5, output_token_ids=[7, 7, 7, 9])]         # no repetition
    logits = torch.randn(3, vocab, generator=g)
    want = torch.stack([_naive_penalties(logits[i], r) for i, r in enumerate(rows)])
    torch.testing.assert_close(apply_penalties(logits.clone(), rows), want, rtol=0, atol=1e-6)
    cached = [dataclasses.replace(r, prompt_ids=distinct_ids(r.prompt_token_ids, "cpu")) for r in rows]
    assert torch.equal(apply_penalties(logits.clone(), cached), apply_penalties(logits.clone(), rows))


def test_two_level_inverse_cdf_draws_what_the_flat_cdf_draws():
    from tandem.runner.sampler import _flat_inverse_cdf, _inverse_cdf

    g = torch.Generator().manual_seed(9)
    vocab = 50_000  # large enough for the blocked path, with a partial last block
    logits = torch.randn(4, vocab, generator=g) * torch.tensor([[0.5], [3.0], [8.0], [1.0]])
    logits[3, ::3] = float("-inf")  # masked tokens (min_p) must never be drawn
    uniform = torch.rand(2000, dtype=torch.float64, generator=g)
    rows = torch.arange(2000) % 4
    got = torch.cat([_inverse_cdf(logits[rows[i:i + 200]], uniform[i:i + 200]) for i in range(0, 2000, 200)])
    want = torch.cat([_flat_inverse_cdf(logits[rows[i:i + 200]], uniform[i:i + 200])
                      for i in range(0, 2000, 200)])
    assert torch.equal(got, want)
    assert not torch.isinf(logits[rows, got]).any()
    assert len(set(got[rows == 0].tolist())) > 400  # a flat row spreads over many blocks


def test_top_p_below_float32_range_keeps_the_best_token():
    # found by tests/api/test_fuzz_api.py: top_p 1e-308 is > 0 but reads as 0.0 in float32
    logits = torch.tensor([[0.5, 2.0, 1.0, -1.0]])
    r = seeded(3, top_p=1e-308)
    assert Sampler().sample(logits, [r]).token_ids == [1]
