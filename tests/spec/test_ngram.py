"""Prompt lookup: the continuation of the most recent earlier occurrence of the longest suffix."""

import numpy as np

from tandem.spec.ngram import NgramProposer, lookup


def _a(*xs):
    return np.array(xs, dtype=np.int32)


def test_longest_suffix_wins_and_the_most_recent_occurrence():
    #            0  1  2  3  4  5  6  7  8  9 10 11
    tokens = _a(1, 2, 3, 9, 1, 2, 4, 5, 7, 1, 2)
    # suffix [1, 2] occurs at 0 and 4: the most recent (4) is followed by 4, 5, 7
    assert lookup(tokens, 1, 3, 3) == [4, 5, 7]
    tokens = _a(5, 1, 2, 3, 8, 8, 1, 2, 6, 5, 1, 2)
    # [5, 1, 2] occurs at 0 only: it beats the more recent [1, 2] at 6
    assert lookup(tokens, 1, 3, 2) == [3, 8]


def test_no_occurrence_no_proposal_and_min_n_respected():
    assert lookup(_a(1, 2, 3, 4), 1, 3, 4) == []
    assert lookup(_a(7, 1, 9, 2, 1), 2, 3, 4) == []       # only a 1-gram repeats
    assert lookup(_a(7, 1, 9, 2, 1), 1, 3, 4) == [9, 2, 1]
    assert lookup(_a(3), 1, 3, 4) == []


def test_proposer_follows_a_growing_request():
    class Req:
        def __init__(self, tokens):
            self.all_token_ids = tokens

    req = Req([10, 11, 12, 13, 10, 11])
    p = NgramProposer(k=2, min_n=1, max_n=4)
    assert p.propose([req]) == [[12, 13]]
    req.all_token_ids += [12, 13]
    assert p.propose([req]) == [[10, 11]]   # [10, 11, 12, 13] occurred at 0: then 10, 11
