"""Adaptive draft length: long drafts while they are accepted, none (with probes) when they are
not, and the step's total capped longest-first."""

from tandem.spec.adaptive import AdaptiveDraftLength


class R:
    pass


def test_acceptance_sets_the_length():
    ctl = AdaptiveDraftLength(k_max=6, max_tokens_per_step=100, min_use_probability=0.3)
    good, bad = R(), R()
    assert ctl.lengths([good]) == [1]          # prior 1/2: 0.5 >= 0.3 > 0.25
    for _ in range(10):
        ctl.observe(good, 4, 4)                # every draft accepted
        ctl.observe(bad, 4, 0)                 # never
    assert ctl.acceptance(good) > 0.95 and ctl.acceptance(bad) < 0.1
    assert ctl.lengths([good, bad]) == [6, 0]


def test_a_request_without_drafts_is_probed_now_and_then():
    ctl = AdaptiveDraftLength(k_max=4, max_tokens_per_step=100, probe_every=4)
    req = R()
    for _ in range(10):
        ctl.observe(req, 4, 0)
    seen = [ctl.lengths([req])[0] for _ in range(8)]
    assert seen == [0, 0, 0, 1, 0, 0, 0, 1]


def test_the_step_budget_trims_the_longest_first():
    ctl = AdaptiveDraftLength(k_max=8, max_tokens_per_step=10, min_use_probability=0.3)
    reqs = [R() for _ in range(3)]
    for r, acc in zip(reqs, (8, 8, 2)):
        for _ in range(10):
            ctl.observe(r, 8, acc)
    assert ctl.lengths(reqs) == [4, 4, 2]


def _trained(ctl, accepted, proposed=8, steps=40):
    req = R()
    for _ in range(steps):
        ctl.observe(req, proposed, accepted)
    return req


def test_the_default_threshold_keeps_draft_tokens_used_one_time_in_ten():
    # one accepted per draft: a = 1/2; positions used with probability 1/2, 1/4, 1/8, 1/16
    ctl = AdaptiveDraftLength(8, 100)
    assert ctl.lengths([_trained(ctl, 1)]) == [3]
    strict = AdaptiveDraftLength(8, 100, min_use_probability=0.3)
    assert strict.lengths([_trained(strict, 1)]) == [1]


def test_a_method_that_sizes_its_drafts_is_switched_off_not_shortened():
    ctl = AdaptiveDraftLength(8, 100, shorten=False, probe_every=4)
    middling, hopeless = _trained(ctl, 1), _trained(ctl, 0)
    assert ctl.lengths([middling, hopeless]) == [8, 0]
    assert [ctl.lengths([hopeless])[0] for _ in range(4)] == [0, 0, 1, 0]   # probes stay single tokens
