"""Suffix decoding: drafts follow the most frequent continuation of the longest useful match, as
long as their estimated probability holds, from the request's own context or its tenant's earlier
outputs; the per-step cost does not grow with the context."""

import time

import numpy as np

from tandem.spec.suffix import SuffixConfig, SuffixProposer, best_draft, follow
from tandem.types import RequestContext


class Req:
    def __init__(self, tokens, tenant=None, salt=None, output=()):
        self.all_token_ids = list(tokens) + list(output)
        self.output_token_ids = list(output)
        self.context = RequestContext(tenant=tenant, cache_salt=salt)


def _a(*xs):
    return np.array(xs, dtype=np.int32)


def test_follow_takes_the_majority_and_multiplies_the_shares():
    #              0  1  2  3  4  5  6  7  8  9 10 11
    tokens = _a(9, 1, 2, 9, 1, 2, 9, 1, 3, 9, 4, 4)
    ends = np.array([0, 3, 6, 9])             # four occurrences of 9
    # after 9: 1 (x3) or 4: 1 at 3/4; after 9 1: 2 (x2) or 3: 2 at 2/3, so 1/2; then 9 and 1
    # (2/2 each); then 2 or 3 (a tie: the more recent, 3) at 1/2, so 1/4
    d = follow(tokens, ends, 5, 0.1)
    assert d.tokens == [1, 2, 9, 1, 3]
    assert abs(d.score - (0.75 + 0.5 + 0.5 + 0.5 + 0.25)) < 1e-9
    # the same with a threshold of 0.6: stops before the 2 (probability 1/2)
    assert follow(tokens, ends, 5, 0.6).tokens == [1]


def test_follow_breaks_ties_by_recency_and_stops_at_separators():
    tokens = _a(7, 1, 7, 2, 7, 5, -1, 8)
    assert follow(tokens, np.array([0, 2]), 3, 0.1).tokens == [2, 7, 5]   # tie 1/2 vs 1/2: the later
    assert follow(tokens, np.array([4]), 3, 0.1).tokens == [5]            # stops at the separator


def test_own_context_longest_match_and_its_length_bound():
    #    0  1  2  3  4  5  6  7  8  9 10 11 12 13 14
    seq = [1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 6, 8, 1, 2, 3]
    p = SuffixProposer(k=4)
    # "1 2 3" matched 3 tokens at both earlier places: then 4 (2/2), then 5 or 6 (tie: the
    # later, 6, at 1/2), then 8; the match length (3) bounds the draft to 3 tokens
    assert p.propose([Req(seq)]) == [[4, 6, 8]]
    # a longer match earns the longer draft, a 1-token match only one token
    p = SuffixProposer(k=4)
    assert p.propose([Req([5, 6, 7, 8, 1, 1, 5])]) == [[6]]
    p = SuffixProposer(k=4, cfg=SuffixConfig(max_spec_factor=2.0))
    assert p.propose([Req([5, 6, 7, 8, 1, 1, 5])]) == [[6, 7]]


def test_limits_and_no_match():
    p = SuffixProposer(k=8)
    seq = [3, 4, 5, 6, 7, 8, 9, 10, 3, 4, 5, 6, 7]
    assert p.propose([Req(seq)], [2]) == [[8, 9]]
    assert p.propose([Req([1, 2, 3])]) == [[]]
    assert p.propose([Req(seq)], [0]) == [[]]


def test_tenant_outputs_are_used_within_the_tenant_only():
    call = [50, 51, 52, 53, 54, 55, 56]
    p = SuffixProposer(k=4)
    done = Req([1, 2, 3], tenant="t1", output=[40] + call)
    p.finished(done)
    # the new request has never seen the call: its own context has no match
    mine = Req([9, 8, 7, 50, 51, 52], tenant="t1")
    other = Req([9, 8, 7, 50, 51, 52], tenant="t2")
    salted = Req([9, 8, 7, 50, 51, 52], tenant="t1", salt="s")
    assert p.propose([mine, other, salted]) == [[53, 54, 55], [], []]


def test_the_request_grows_incrementally():
    p = SuffixProposer(k=3)
    req = Req([10, 11, 12, 13, 10])
    assert p.propose([req]) == [[11]]
    req.all_token_ids += [11, 12]
    assert p.propose([req]) == [[13, 10, 11]]


def test_a_step_over_a_long_context_stays_cheap():
    """60,000 tokens: indexed once (the first call), then each step adds a token and drafts in
    well under a few ms of CPU time (the bound is loose for a shared machine)."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 4096, 900).tolist()
    req = Req((base * 70)[:60_000])
    p = SuffixProposer(k=4)
    p.propose([req])
    costs = []
    for _ in range(50):
        draft = p.propose([req])[0]
        req.all_token_ids.append(draft[0] if draft else 1)
        start = time.thread_time()
        p.propose([req])
        costs.append(time.thread_time() - start)
    assert np.median(costs) < 0.003, costs
