"""Suffix decoding (SuffixDecoding, arXiv 2411.04975, as in Arctic Inference): drafts from what
followed the sequence's current suffix before, in the request's own context and in the earlier
outputs of the same tenant, of a length set by how often that continuation was taken.

What a depth-D suffix tree with counts answers, computed from positions instead of nodes:
- the "node" of match length m is the set of earlier occurrences whose m tokens ending there
  equal the sequence's last m tokens (m <= `max_depth`); its count is the set's size;
- from a node, the draft follows the most frequent next token (ties: the most recent one); its
  share is (occurrences continuing with it) / (occurrences at the node, those that end there
  included), and the draft's probability is the product of the shares so far. The draft stops
  when that probability falls below `min_token_prob`, or at min(k, factor * m + offset) tokens
  (a longer match earns a longer draft);
- every match length is scored (sum of the drafted tokens' probabilities) and the best draft
  wins, the longer match on a tie; the request's own context and its tenant's outputs
  (tandem/spec/tenant_history.py) are searched alike and the better draft is proposed.
The occurrences come from TokenIndex (tandem/spec/token_index.py: positions per token id,
indexed incrementally); the match is extended backwards over at most `max_candidates` most
recent occurrences of the last token with a few vectorized comparisons per length, and a draft
is scored only where the set of occurrences shrinks (between two such lengths the draft can only
grow). A step costs O(max_depth) numpy calls per request, whatever the context's length.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tandem.spec.tenant_history import TenantHistories, TenantKey
from tandem.spec.token_index import TokenIndex


@dataclass(frozen=True)
class SuffixConfig:
    max_depth: int = 24               # longest suffix matched (Arctic's max_tree_depth)
    max_spec_factor: float = 1.0      # a match of m tokens drafts at most factor * m + offset
    max_spec_offset: float = 0.0
    # stop once the draft's estimated probability is below this (Arctic's default is 0.1; a verify
    # position is not free on a CPU, where 0.3 measured better on the demo's tool calls)
    min_token_prob: float = 0.3
    max_candidates: int = 4096        # most recent occurrences of the last token examined
    tenant_tokens: int = 65536        # earlier outputs kept per tenant, oldest dropped
    max_tenants: int = 256            # tenants kept, least recently used dropped


@dataclass(frozen=True)
class Draft:
    tokens: list[int]
    score: float = 0.0       # sum of the drafted tokens' estimated probabilities
    match_len: int = 0


NO_DRAFT = Draft([])


def follow(tokens: np.ndarray, ends: np.ndarray, limit: int, min_prob: float) -> Draft:
    """The most frequent continuation after the occurrences ending at `ends` (int64[c],
    ascending) in `tokens` (int32[N]; negative ids end a continuation), at most `limit` tokens."""
    if limit <= 0 or ends.size == 0:
        return NO_DRAFT
    size = tokens.size
    out: list[int] = []
    prob, score = 1.0, 0.0
    rows = ends
    while len(out) < limit:
        if rows.size == 1:   # one occurrence left: its continuation, at the same probability
            start = int(rows[0]) + len(out) + 1
            run = tokens[start:min(size, start + limit - len(out))]
            stop = np.flatnonzero(run < 0)
            run = run[:stop[0]] if stop.size else run
            out += run.tolist()
            score += prob * run.size
            break
        pos = rows + (len(out) + 1)
        nxt = np.full(rows.size, -1, dtype=np.int32)
        inside = pos < size
        nxt[inside] = tokens[pos[inside]]
        live = nxt[nxt >= 0]
        if live.size == 0:
            break
        last = live[-1]   # the most recent occurrence's token
        if live.size == rows.size and bool((live == last).all()):
            token, count = int(last), live.size
        else:
            values, counts = np.unique(live, return_counts=True)
            count = int(counts.max())
            tied = values[counts == count]
            token = int(tied[0]) if tied.size == 1 else int(live[np.isin(live, tied)][-1])
        prob *= count / rows.size
        if prob < min_prob:
            break
        out.append(token)
        score += prob
        rows = rows[nxt == token]
    return Draft(out, score)


def best_draft(tokens: np.ndarray, ends: np.ndarray, context: np.ndarray, k: int,
               cfg: SuffixConfig) -> Draft:
    """The best draft over every match length. `ends` (int64[c], ascending): positions in
    `tokens` [N] holding context[-1] (the occurrences of a 1-token match); `context` [L]: the
    sequence whose continuation is drafted (its last max_depth tokens suffice)."""
    cands = ends[-cfg.max_candidates:]
    best = NO_DRAFT
    m = 1
    depth = min(cfg.max_depth, context.size)
    while cands.size:
        # cands: occurrences whose last m tokens equal the context's last m
        if m < depth:
            back = cands - m
            ok = back >= 0
            longer, back = (cands, back) if ok.all() else (cands[ok], back[ok])
            longer = longer[tokens[back] == context[context.size - 1 - m]]
        else:
            longer = cands[:0]
        if longer.size < cands.size:   # the set shrinks after m: its draft, at its longest match
            limit = min(k, int(m * cfg.max_spec_factor + cfg.max_spec_offset + 1e-6))
            draft = follow(tokens, cands, limit, cfg.min_token_prob)
            if draft.tokens and draft.score >= best.score:
                best = Draft(draft.tokens, draft.score, m)
        cands = longer
        m += 1
    return best


class SuffixProposer:
    def __init__(self, k: int, cfg: SuffixConfig = SuffixConfig()) -> None:
        self.k = k
        self.cfg = cfg
        self._requests: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # request -> TokenIndex
        self.histories = TenantHistories(cfg.tenant_tokens, cfg.max_tenants)

    @staticmethod
    def tenant(request) -> TenantKey:
        ctx = request.context
        return (ctx.tenant, ctx.cache_salt)

    def _index(self, request) -> TokenIndex:
        """The request's tokens, indexed; only tokens new since the last call are added."""
        index = self._requests.get(request)
        tokens = request.all_token_ids
        if index is None or index.length > len(tokens):
            index = self._requests[request] = TokenIndex()
        index.extend(tokens[index.length:])
        return index

    def propose(self, requests: Sequence, limits: Sequence[int] | None = None) -> list[list[int]]:
        out = []
        for i, req in enumerate(requests):
            k = self.k if limits is None else min(self.k, limits[i])
            out.append(self.draft(req, k).tokens if k > 0 else [])
        return out

    def draft(self, request, k: int) -> Draft:
        index = self._index(request)
        tokens = index.tokens
        if tokens.size < 2:
            return NO_DRAFT
        context = tokens[max(0, tokens.size - self.cfg.max_depth):]
        last = int(context[-1])
        own = index.positions(last)[:-1]   # the last position is the context's own end
        best = best_draft(tokens, own, context, k, self.cfg)
        history = self.histories.get(self.tenant(request))
        if history is not None and history.index.length:
            theirs = best_draft(history.index.tokens, history.index.positions(last), context, k, self.cfg)
            if theirs.score > best.score:
                best = theirs
        return best

    def observe(self, request, num_proposed: int, num_accepted: int) -> None:
        pass

    def finished(self, request) -> None:
        """The request's output joins its tenant's history; its own index is dropped."""
        self._requests.pop(request, None)
        self.histories.add(self.tenant(request), request.output_token_ids)
