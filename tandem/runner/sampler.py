"""Pick the next token of every running request from its logits.

One `Sampler.sample` call per engine step turns logits [N, vocab] (float32, one row per
request) into N token ids, applying each request's own SamplingParams. Order, as in vLLM:

  raw logits --(logprobs are read here)--> repetition / frequency / presence penalties
  --> logit_bias added --> min_tokens mask (EOS and stop_token_ids banned) --> greedy rows: argmax
  --> random rows: / temperature --> min_p --> top_k --> top_p --> sample

Logprobs are "raw": log_softmax of the model's logits before any penalty, temperature or
truncation (OpenAI's and vLLM's default): they describe the model, not the sampling
distribution, so a sampled token's logprob can be below entries that top_k/top_p kept out.

Reproducibility: sampling is inverse-CDF with one uniform per row per step; a row with a
generator draws that uniform from it, and every other operation is row-wise, so a seeded
request samples the same tokens whatever else shares its batch.

Device-agnostic: everything stays on `logits.device`; generators must live on that device
(`make_generator(seed, device)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tandem.types import SamplingParams, TokenLogprob

# Temperatures below this are treated as greedy (dividing by them overflows float32).
MIN_TEMPERATURE = 1e-5
# top-k/top-p first look at this many best tokens per row (see apply_top_k_top_p).
TOP_CANDIDATES = 1024
_CDF_BLOCK = 1024   # columns per block of the two-level inverse CDF


@dataclass(frozen=True, eq=False)
class SamplingRow:
    """What the sampler needs to know about one request in this step."""

    params: SamplingParams
    output_token_ids: Sequence[int] = ()   # generated so far (penalties, min_tokens)
    prompt_token_ids: Sequence[int] = ()   # repetition penalty covers prompt + output
    prompt_ids: torch.Tensor | None = None  # distinct_ids(prompt_token_ids), cached by the caller
    generator: torch.Generator | None = None  # per-request RNG; None = torch's global RNG
    eos_token_ids: tuple[int, ...] = ()    # banned with stop_token_ids until min_tokens


@dataclass(frozen=True)
class SamplerOutput:
    token_ids: list[int]                    # [N]
    logprobs: list[TokenLogprob | None]     # [N]; None where params.logprobs is None


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator | None:
    """The per-request RNG for `seed` (None: no generator, use the global RNG).

    Create it once per request and pass it in every step: its state advances as it samples.
    """
    if seed is None:
        return None
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)
    return gen


def _is_greedy(p: SamplingParams) -> bool:
    return p.greedy or p.temperature < MIN_TEMPERATURE


class Sampler:
    """Stateless: all per-request state arrives in the SamplingRows."""

    def sample(self, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> SamplerOutput:
        # logits: [N, V] float32; never modified in place.
        n, vocab = logits.shape
        if len(rows) != n:
            raise ValueError(f"{n} logits rows but {len(rows)} sampling rows")
        device = logits.device

        lp_idx = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
        raw_logprobs = (torch.log_softmax(logits[lp_idx], dim=-1) if lp_idx else None)  # [L, V]

        work = logits
        pen_idx = [i for i, r in enumerate(rows) if r.params.needs_penalties]
        bias = _logit_biases(rows)
        ban = _min_tokens_bans(rows, vocab)
        if pen_idx or bias is not None or ban is not None:
            work = logits.clone()
            if pen_idx:
                idx = _index(pen_idx, n, device)
                work[idx] = apply_penalties(work[idx], [rows[i] for i in pen_idx])
            if bias is not None:
                row_ids, tok_ids, values = (t.to(device) for t in bias)
                work.index_put_((row_ids, tok_ids), values, accumulate=True)
            if ban is not None:
                work[ban[0].to(device), ban[1].to(device)] = float("-inf")

        tokens = torch.empty(n, dtype=torch.long, device=device)  # [N]
        greedy_idx = [i for i, r in enumerate(rows) if _is_greedy(r.params)]
        random_idx = [i for i, r in enumerate(rows) if not _is_greedy(r.params)]
        if greedy_idx:
            idx = _index(greedy_idx, n, device)
            tokens[idx] = work[idx].argmax(dim=-1)
        if random_idx:
            idx = _index(random_idx, n, device)
            tokens[idx] = _sample_random(work[idx], [rows[i] for i in random_idx])

        token_list = tokens.tolist()
        logprobs: list[TokenLogprob | None] = [None] * n
        if raw_logprobs is not None:
            for i, entry in zip(lp_idx, gather_logprobs(raw_logprobs, tokens[lp_idx],
                                                         [rows[i].params.logprobs for i in lp_idx])):
                logprobs[i] = entry
        return SamplerOutput(token_ids=token_list, logprobs=logprobs)


def _logit_biases(rows: Sequence[SamplingRow]
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(row index, token id, bias) triples to add to the logits, or None when no row has any."""
    entries = [(i, t, b) for i, r in enumerate(rows) for t, b in r.params.logit_bias]
    if not entries:
        return None
    row_ids, tok_ids, values = zip(*entries)
    return torch.tensor(row_ids), torch.tensor(tok_ids), torch.tensor(values, dtype=torch.float32)


def _min_tokens_bans(rows: Sequence[SamplingRow], vocab: int
                     ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(row index, token id) pairs to set to -inf: stop tokens of rows below min_tokens.

    EOS is banned only when it would stop the request (not ignore_eos); stop_token_ids always.
    """
    row_ids: list[int] = []
    tok_ids: list[int] = []
    for i, r in enumerate(rows):
        p = r.params
        if len(r.output_token_ids) >= p.min_tokens:
            continue
        banned = set(p.stop_token_ids)
        if not p.ignore_eos:
            banned.update(r.eos_token_ids)
        for t in banned:
            if 0 <= t < vocab:
                row_ids.append(i)
                tok_ids.append(t)
    if not row_ids:
        return None
    return torch.tensor(row_ids), torch.tensor(tok_ids)


def apply_penalties(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """Penalties for M rows, touching only the tokens each row has seen (a long prompt costs a
    gather and a scatter of its distinct ids, not passes over the vocabulary).

    logits: [M, V], modified in place and returned. Repetition (HF): over tokens seen in prompt
    or output, positive logits are divided by the penalty and negative ones multiplied. Then
    OpenAI's logit -= frequency * count_in_output + presence * (count_in_output > 0).
    """
    device = logits.device
    for i, r in enumerate(rows):
        p = r.params
        row = logits[i]  # [V], a view
        out_ids = torch.tensor(r.output_token_ids, dtype=torch.long, device=device) \
            if r.output_token_ids else None
        if p.repetition_penalty != 1.0:
            prompt_ids = r.prompt_ids if r.prompt_ids is not None else \
                distinct_ids(r.prompt_token_ids, device)
            seen = prompt_ids if out_ids is None else torch.cat((prompt_ids, out_ids))
            # every copy of an id gets the value computed from the same original logit
            vals = row[seen]
            row[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
        if out_ids is not None and (p.frequency_penalty != 0.0 or p.presence_penalty != 0.0):
            ids, counts = torch.unique(out_ids, return_counts=True)
            row[ids] = row[ids] - p.frequency_penalty * counts.to(row.dtype) - p.presence_penalty
    return logits


def distinct_ids(token_ids: Sequence[int], device: torch.device | str) -> torch.Tensor:
    """LongTensor of the distinct ids among token_ids (what a repetition penalty touches)."""
    return torch.unique(torch.tensor(list(token_ids), dtype=torch.long, device=device))


def _sample_random(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
    """logits: [R, V] (not modified) -> sampled token ids [R].

    Inverse-CDF sampling, one uniform per row, over the row's kept tokens in vocabulary order
    (a truncated row's CDF covers only its kept set: C tokens, not V). The CDF is accumulated
    in float64 so that rounding over a large vocabulary does not shift tokens' intervals.
    """
    device = logits.device
    temp = torch.tensor([r.params.temperature for r in rows], dtype=logits.dtype, device=device)
    logits = logits / temp.unsqueeze(1)

    # min_p: drop tokens whose probability is below min_p * (the top token's probability).
    if any(r.params.min_p > 0.0 for r in rows):
        min_p = torch.tensor([r.params.min_p for r in rows], dtype=logits.dtype, device=device)
        probs = torch.softmax(logits, dim=-1)  # [R, V]
        threshold = min_p.unsqueeze(1) * probs.amax(dim=-1, keepdim=True)  # [R, 1]
        logits = logits.masked_fill(probs < threshold, float("-inf"))

    uniform = torch.empty(len(rows), dtype=torch.float64, device=device)  # [R]
    unseeded = [i for i, r in enumerate(rows) if r.generator is None]
    if unseeded:
        uniform[_index(unseeded, len(rows), device)] = torch.rand(
            len(unseeded), dtype=torch.float64, device=device)
    for i, r in enumerate(rows):
        if r.generator is not None:  # exactly one draw per step: batch-independent
            uniform[i] = torch.rand(1, dtype=torch.float64, device=device, generator=r.generator)[0]

    tokens = torch.empty(len(rows), dtype=torch.long, device=device)
    truncated = [r.params.top_k > 0 or r.params.top_p < 1.0 for r in rows]
    trunc = [i for i, t in enumerate(truncated) if t]
    whole = [i for i, t in enumerate(truncated) if not t]
    if whole:
        idx = _index(whole, len(rows), device)
        tokens[idx] = _inverse_cdf(logits[idx], uniform[idx])
    if trunc:
        idx = _index(trunc, len(rows), device)
        kept = top_k_top_p_kept(logits[idx], [rows[i].params.top_k for i in trunc],
                                [rows[i].params.top_p for i in trunc])
        for i, (ids, vals) in zip(trunc, kept):
            tokens[i] = ids[_inverse_cdf(vals.unsqueeze(0), uniform[i:i + 1])[0]]
    return tokens


def _inverse_cdf(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """logits [R, N], uniform [R] in [0, 1) -> [R] column indices drawn from softmax(logits).

    Over a large vocabulary, in two levels: the float64 CDF of blocks of _CDF_BLOCK columns
    picks a block, then the CDF inside that block picks the column (one pass over the row
    instead of a float64 copy and cumsum of all of it)."""
    n = logits.shape[1]
    if n < 8 * _CDF_BLOCK:
        return _flat_inverse_cdf(logits, uniform)
    probs = torch.softmax(logits, dim=-1)  # [R, N]
    full = n // _CDF_BLOCK * _CDF_BLOCK
    # block sums in float32 (their rounding moves a block's bounds by ~1e-7 of its mass, as the
    # float32 softmax itself does); accumulated over blocks in float64
    sums = torch.cat([probs[:, :full].unflatten(1, (-1, _CDF_BLOCK)).sum(-1),
                      probs[:, full:].sum(-1, keepdim=True)], dim=1)  # [R, B]
    block_cdf = sums.to(torch.float64).cumsum(dim=1)
    target = uniform * block_cdf[:, -1]  # [R]
    # a block of zero mass has the CDF of the one before: never the first to exceed the target
    blocks = torch.searchsorted(block_cdf, target.unsqueeze(1), right=True).squeeze(1)
    blocks = blocks.clamp_(max=block_cdf.shape[1] - 1).tolist()
    out = torch.empty(len(blocks), dtype=torch.long, device=logits.device)
    for i, b in enumerate(blocks):
        start = b * _CDF_BLOCK
        seg = probs[i, start:start + _CDF_BLOCK].to(torch.float64)
        before = block_cdf[i, b - 1] if b else 0.0
        j = int(torch.searchsorted(seg.cumsum(0), (target[i] - before).unsqueeze(0), right=True))
        if j >= seg.shape[0]:  # the block's sum rounded above its running total: its last
            j = int(seg.nonzero()[-1])  # token of non-zero mass (never a masked one)
        out[i] = start + j
    return out


def _flat_inverse_cdf(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    cdf = torch.softmax(logits, dim=-1).to(torch.float64).cumsum(dim=-1)  # [R, N]
    target = (uniform * cdf[:, -1]).unsqueeze(1)  # [R, 1], below the total mass
    # First column whose CDF exceeds the target: never a zero-probability (masked) one.
    return torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


def _index(idx: list[int], n: int, device: torch.device) -> torch.Tensor | slice:
    """Row selector: a plain slice when idx is every row in order (no gather copy)."""
    if len(idx) == n:
        return slice(None)
    return torch.tensor(idx, device=device)


def apply_top_k_top_p(logits: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
    """[T, V] logits with every token top_k_top_p_kept drops set to -inf."""
    out = torch.full_like(logits, float("-inf"))
    for i, (ids, vals) in enumerate(top_k_top_p_kept(logits, top_k, top_p)):
        out[i, ids] = vals
    return out


def top_k_top_p_kept(logits: torch.Tensor, top_k: list[int], top_p: list[float]
                     ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per row, the tokens top-k (0 = off) then top-p over the top-k set keep: (ids in
    ascending order, their logits).

    logits: [T, V]. top-p keeps the smallest best-first prefix whose probability mass reaches
    top_p (the top token always stays); top_p == 1 keeps everything.
    Fast path: most mass sits in a few tokens, so only the best C = max(TOP_CANDIDATES,
    max top_k) tokens (max top_k alone when every row has one) are sorted (topk); rows whose
    top-p cut is not within them fall back to a full sort. Both paths compute the same prefix
    sums and the kept set comes out in id order, so the path (which depends on the batch)
    never changes a row's result.
    """
    t_count, vocab = logits.shape
    device = logits.device
    k = torch.tensor(top_k, device=device)  # [T]
    p = torch.tensor(top_p, dtype=logits.dtype, device=device)  # [T]
    # top-p's mass is relative to what top-k kept, so a row with top-k needs no normalizer
    # but a shift (its best logit); only rows without top-k need the vocabulary's log-sum-exp
    lse = logits.amax(dim=-1, keepdim=True)  # [T, 1]
    no_k = [i for i, kk in enumerate(top_k) if kk <= 0]
    if no_k:
        sel = _index(no_k, t_count, device)
        lse[sel] = logits[sel].logsumexp(dim=-1, keepdim=True)
    kept: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * t_count
    rest = list(range(t_count))  # rows still to do
    # Rows that all have a top_k need no more than the largest one (torch's topk costs a pass
    # over the vocabulary whatever C is: one size is tried, not a growing series).
    cand = min(vocab, max(top_k) if min(top_k) > 0 else max(TOP_CANDIDATES, max(top_k)))
    if cand * 4 < vocab:
        vals, ids = logits.topk(cand, dim=-1)  # [T, C], best first
        drop, covered = _cut_sorted(vals, lse, k, p)
        is_covered = covered.tolist()
        done = [j for j, ok in enumerate(is_covered) if ok]
        _collect(kept, done, vals, ids, drop, done)
        rest = [j for j, ok in enumerate(is_covered) if not ok]
    if rest:
        sub = _index(rest, t_count, device)
        vals, ids = logits[sub].sort(dim=-1, descending=True)  # [S, V]
        drop, _ = _cut_sorted(vals, lse[sub], k[sub], p[sub])
        _collect(kept, rest, vals, ids, drop, list(range(len(rest))))
    return kept  # type: ignore[return-value]


def _collect(kept: list, rows: list[int], vals: torch.Tensor, ids: torch.Tensor, drop: torch.Tensor,
             at: list[int]) -> None:
    """kept[rows[j]] = (ids ascending, logits) of the undropped prefix of sorted row at[j]."""
    counts = (~drop).sum(dim=1).tolist()  # the dropped tokens are a suffix of the sorted order
    for row, a in zip(rows, at):
        n = counts[a]
        order = ids[a, :n].argsort()
        kept[row] = (ids[a, :n][order], vals[a, :n][order])


def _cut_sorted(vals: torch.Tensor, lse: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """vals: [T, C] a row's best C logits, descending; lse: [T, 1] log-normalizer of the row
    (for a row with top_k, any shift: its top-p mass is relative to the kept tokens').

    Returns (drop [T, C] bool, covered [T] bool): covered rows' cut lies within the C tokens.
    """
    c = vals.shape[1]
    probs = (vals - lse).exp()  # [T, C] true probabilities
    cum = probs.cumsum(dim=-1)  # [T, C]
    k_eff = torch.where(top_k > 0, top_k, c).clamp(max=c)  # [T]
    drop = torch.arange(c, device=vals.device).unsqueeze(0) >= k_eff.unsqueeze(1)
    # top-p is relative to the mass that top-k kept (all of it when top-k is off).
    kept_mass = torch.where(top_k > 0, cum.gather(1, (k_eff - 1).unsqueeze(1)).squeeze(1),
                            torch.ones_like(top_p))  # [T]
    mass_before = (cum - probs) / kept_mass.unsqueeze(1)  # [T, C] mass of strictly better tokens
    drop |= (mass_before >= top_p.unsqueeze(1)) & (top_p < 1.0).unsqueeze(1)
    drop[:, 0] = False  # the best token always stays (a top_p below float32's range reads as 0)
    covered = (top_k > 0) | (top_p >= 1.0) | (cum[:, -1] >= top_p)
    return drop, covered


def gather_logprobs(raw_logprobs: torch.Tensor, tokens: torch.Tensor,
                    top_counts: Sequence[int], with_rank: bool = False) -> list[TokenLogprob]:
    """raw_logprobs: [L, V] log_softmax of raw logits; tokens: [L] the ids to report.
    `with_rank`: also each token's rank (1 + how many ids have a higher logprob)."""
    chosen = raw_logprobs.gather(1, tokens.unsqueeze(1))  # [L, 1]
    ranks: list = [None] * len(top_counts)
    if with_rank:
        ranks = ((raw_logprobs > chosen).sum(dim=-1) + 1).tolist()
    max_k = max(top_counts)
    top_vals: list[list[float]] = [[] for _ in top_counts]
    top_ids: list[list[int]] = [[] for _ in top_counts]
    if max_k > 0:
        vals, ids = raw_logprobs.topk(min(max_k, raw_logprobs.shape[1]), dim=-1)  # [L, k], sorted
        top_vals, top_ids = vals.tolist(), ids.tolist()
    return [TokenLogprob(token_id=int(t), logprob=lp, top=tuple(zip(ids_row[:k], vals_row[:k])),
                         rank=rank)
            for t, lp, ids_row, vals_row, k, rank in zip(tokens.tolist(), chosen.squeeze(1).tolist(),
                                                         top_ids, top_vals, top_counts, ranks)]
