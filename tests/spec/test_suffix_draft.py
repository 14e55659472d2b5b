"""Suffix decoding with a draft model behind it: the suffix draft where it is confident, the draft
model's for the other requests only, and both forget a finished request."""

from tandem.spec.suffix import SuffixProposer
from tandem.spec.suffix_draft import SuffixWithDraftModel
from tandem.types import RequestContext


class Req:
    def __init__(self, tokens):
        self.all_token_ids = list(tokens)
        self.output_token_ids = []
        self.context = RequestContext()


class FakeDraft:
    def __init__(self):
        self.asked, self.done = [], []

    def propose(self, requests, limits):
        self.asked.append((list(requests), list(limits)))
        return [[7] * k for k in limits]

    def finished(self, request):
        self.done.append(request)


def test_confident_suffix_drafts_win_the_rest_go_to_the_draft_model():
    draft = FakeDraft()
    method = SuffixWithDraftModel(SuffixProposer(k=8), draft, min_score=2.0)
    repeated = Req([1, 2, 3, 4, 5, 6, 1, 2, 3])      # "1 2 3" seen before: 4 5 6 with probability 1
    fresh = Req([9, 8, 7, 6])                        # nothing repeats
    once = Req([4, 5, 9, 4])                         # a 1-token match: a 1-token draft, score 1 < 2
    assert method.propose([repeated, fresh, once], [8, 3, 2]) == [[4, 5, 6], [7, 7, 7], [7, 7]]
    assert draft.asked == [([fresh, once], [3, 2])]
    # a limit of 1: a 1-token suffix draft is confident enough
    assert method.propose([once], [1]) == [[5]]
    method.finished(repeated)
    assert draft.done == [repeated]
