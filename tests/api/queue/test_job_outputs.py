"""JobOutputs: a job's engine requests' outputs saved, restored through JSON, continued, or
dropped when the backend started over."""

from __future__ import annotations

import math

import orjson

from tandem.api.queue.job_outputs import JobOutputs
from tandem.types import EngineRequest, FinishReason, RequestDelta, SamplingParams, TokenLogprob


def delta(ids, text, *, out, cached=0, finished=False, lps=True) -> RequestDelta:
    return RequestDelta(request_id="r", new_token_ids=list(ids), new_text=text, finished=finished,
                        finish_reason=FinishReason.LENGTH if finished else None,
                        logprobs=[TokenLogprob(t, -0.5) for t in ids] if lps else None,
                        num_prompt_tokens=7, num_cached_tokens=cached, num_output_tokens=out)


def reqs(n: int) -> list[EngineRequest]:
    return [EngineRequest(f"r-{i}", [1, 2, 3], SamplingParams(max_tokens=10)) for i in range(n)]


def through_json(value):
    return orjson.loads(orjson.dumps(value))


def test_saved_output_is_continued_and_replayed_before_the_new_tokens():
    first = JobOutputs(2, None)
    assert first.pending() == [0, 1] and first.snapshot() is None   # nothing produced yet
    first.add(0, delta([10], "a", out=1, cached=4))
    first.add(0, delta([11, 12], "bc", out=3, cached=4))
    first.add(1, delta([20], "x", out=1, cached=4, finished=True))
    saved = through_json(first.snapshot())

    second = JobOutputs(2, saved)
    assert second.snapshot() is None                                 # nothing new: keep saved
    assert second.pending() == [0]                                   # request 1 had finished
    (resumed,) = second.requests(reqs(2))
    assert resumed.request_id == "r-0" and resumed.resume_output_ids == [10, 11, 12]
    second.add(0, delta([13], "d", out=4, cached=9, finished=True))  # counts the resumed ones
    items = second.deltas()
    assert [(i, d.new_token_ids, d.new_text) for i, d in items] == [
        (0, [10, 11, 12], "abc"), (0, [13], "d"), (1, [20], "x")]
    assert items[0][1].logprobs == [TokenLogprob(t, -0.5) for t in (10, 11, 12)]
    assert items[1][1].num_cached_tokens == 4                        # the first run's prompt hit
    assert items[1][1].finished and items[1][1].num_output_tokens == 4
    assert items[2][1].finished and items[2][1].finish_reason is FinishReason.LENGTH

    third = JobOutputs(2, through_json(second.snapshot()))
    assert third.pending() == []
    (a, b) = third.deltas()
    assert (a[1].new_token_ids, a[1].new_text, a[1].finished) == ([10, 11, 12, 13], "abcd", True)


def test_a_backend_that_started_over_replaces_the_saved_output():
    first = JobOutputs(1, None)
    first.add(0, delta([10, 11], "ab", out=2))
    second = JobOutputs(1, through_json(first.snapshot()))
    second.add(0, delta([30], "z", out=1))       # counts only its own token: it started over
    second.add(0, delta([31], "y", out=2, finished=True))
    assert [d.new_text for _, d in second.deltas()] == ["z", "y"]
    assert JobOutputs(1, second.snapshot()).deltas()[0][1].new_token_ids == [30, 31]


def test_logprobs_of_minus_infinity_and_missing_logprobs_survive():
    first = JobOutputs(1, None)
    first.add(0, RequestDelta(request_id="r", new_token_ids=[5], new_text="e",
                              logprobs=[TokenLogprob(5, -math.inf)], num_output_tokens=1))
    (_, d), = JobOutputs(1, through_json(first.snapshot())).deltas()
    assert d.logprobs == [TokenLogprob(5, -math.inf)]
    mixed = JobOutputs(1, None)
    mixed.add(0, delta([1], "a", out=1, lps=False))
    mixed.add(0, delta([2], "b", out=2))
    (_, d), = JobOutputs(1, through_json(mixed.snapshot())).deltas()
    assert d.logprobs is None and d.new_token_ids == [1, 2]


def test_unusable_saved_progress_starts_over():
    saved = JobOutputs(1, None)
    saved.add(0, delta([1], "a", out=1))
    snap = through_json(saved.snapshot())
    for bad in ({**snap, "v": 99}, {"v": 1, "outputs": []}, {"other": 1}, None,
                {"v": 1, "outputs": [{"new_text": "no ids"}]}):
        fresh = JobOutputs(1, bad)
        assert fresh.deltas() == [] and fresh.requests(reqs(1))[0].resume_output_ids == []
