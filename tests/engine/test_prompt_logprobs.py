"""Prompt logprobs (SamplingParams.prompt_logprobs): every prompt token but the first, scored
by the model given the tokens before it, equal to transformers on the same weights, whatever
the chunking, the prefix cache or preemption."""

import math

import pytest
import torch

from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import _hf_model, prompts, request, run
from tandem.engine.llm import LLM
from tandem.errors import InvalidRequest
from tandem.types import EngineRequest, SamplingParams


def hf_prompt_logprobs(model_dir, prompt) -> torch.Tensor:
    """[len(prompt) - 1, V]: row i is log p(. | prompt[:i + 1])."""
    with torch.no_grad():
        logits = _hf_model(model_dir)(torch.tensor([prompt])).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1)


def scored(deltas):
    found = [d.prompt_logprobs for d in deltas if d.prompt_logprobs is not None]
    assert len(found) == 1, "prompt logprobs must come exactly once, with the first token"
    assert deltas[0].prompt_logprobs is not None
    return found[0]


def assert_matches_hf(model_dir, prompt, entries, k):
    ref = hf_prompt_logprobs(model_dir, prompt)
    assert [e.token_id for e in entries] == prompt[1:]
    for i, e in enumerate(entries):
        row, value = ref[i], ref[i][prompt[i + 1]]
        assert math.isclose(e.logprob, float(value), abs_tol=2e-3), i
        # 1 + the ids scoring higher; ids within rounding of the token's score may fall either way
        surely_higher, maybe_higher = int((row > value + 1e-3).sum()), int((row > value - 1e-3).sum()) - 1
        assert 1 + surely_higher <= e.rank <= 1 + maybe_higher, i
        top_ids = [t for t, _ in e.top]
        assert len(top_ids) == k
        assert top_ids == row.topk(k).indices.tolist(), i


def test_prompt_logprobs_match_transformers(llama_or_qwen3_dir, make_engine):
    engine = make_engine(llama_or_qwen3_dir)
    prompt = prompts(1, seed=11, min_len=30, max_len=30)[0]
    r = request(prompt, max_tokens=3, prompt_logprobs=3)
    out = run(engine, [r])
    assert_matches_hf(llama_or_qwen3_dir, prompt, scored(out[r.request_id]), 3)


def test_chunked_cached_and_preempted_prompts_score_the_same(llama_dir, make_engine):
    # bit-exact ranks across batch shapes: the CPU's kernels; a GPU's differ in the last bits, so
    # a rank can move by a near-tie there
    ps = prompts(6, seed=12, min_len=24, max_len=40)
    alone = make_engine(llama_dir, max_num_batched_tokens=256, device="cpu")
    want = {}
    for p in ps:
        r = request(p, max_tokens=2, prompt_logprobs=1)
        want[tuple(p)] = scored(run(alone, [r])[r.request_id])

    # chunks of at most 16 tokens, a warm prefix cache holding every prompt already, and so few
    # blocks that requests are preempted and recomputed
    engine = make_engine(llama_dir, max_num_batched_tokens=16, num_blocks=24, device="cpu")
    run(engine, [request(p, max_tokens=1) for p in ps])  # fills the prefix cache
    reqs = [request(p, max_tokens=6, prompt_logprobs=1) for p in ps]
    out = run(engine, reqs)
    assert engine.scheduler.num_preemptions > 0
    for r, p in zip(reqs, ps):
        got = scored(out[r.request_id])
        assert out[r.request_id][-1].num_cached_tokens == 0  # scored prompts are computed whole
        assert [e.token_id for e in got] == [e.token_id for e in want[tuple(p)]]
        for a, b in zip(got, want[tuple(p)]):
            assert math.isclose(a.logprob, b.logprob, abs_tol=1e-4) and a.rank == b.rank
            assert [t for t, _ in a.top] == [t for t, _ in b.top]


def test_output_is_unchanged_by_scoring_the_prompt(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    p = prompts(1, seed=13, min_len=20, max_len=20)[0]
    plain, scoring = request(p, max_tokens=8), request(p, max_tokens=8, prompt_logprobs=0)
    out = run(engine, [plain, scoring])
    toks = {rid: [t for d in ds for t in d.new_token_ids] for rid, ds in out.items()}
    assert toks[plain.request_id] == toks[scoring.request_id]
    assert all(d.prompt_logprobs is None for d in out[plain.request_id])
    assert all(e.top == () for e in scored(out[scoring.request_id]))  # k = 0: the token alone


def test_resumed_request_does_not_score_again(llama_dir, make_engine):
    # a migrated stream: its first tokens (and the scored prompt) already reached the client
    engine = make_engine(llama_dir)
    p = prompts(1, seed=14, min_len=12, max_len=12)[0]
    r = EngineRequest("resumed", p, SamplingParams(max_tokens=5, temperature=0.0, prompt_logprobs=2),
                      resume_output_ids=[7, 8])
    out = run(engine, [r])
    assert all(d.prompt_logprobs is None for d in out["resumed"])


def test_one_token_prompt_scores_nothing(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    r = request([42], max_tokens=2, prompt_logprobs=1)
    assert scored(run(engine, [r])[r.request_id]) == []


def test_bad_prompt_logprobs_is_refused(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    with pytest.raises(InvalidRequest) as info:
        engine.add_request(request([1, 2, 3], prompt_logprobs=21))
    assert info.value.param == "prompt_logprobs"


def test_offline_llm_returns_the_scored_prompt(llama_dir):
    llm = LLM(engine_config(llama_dir))
    try:
        p = prompts(1, seed=15, min_len=10, max_len=10)[0]
        scored_one, plain = llm.generate([p, p], [SamplingParams(max_tokens=2, temperature=0.0, prompt_logprobs=0),
                                                   SamplingParams(max_tokens=2, temperature=0.0)])
        assert [e.token_id for e in scored_one.prompt_logprobs] == p[1:]
        assert plain.prompt_logprobs is None and plain.token_ids == scored_one.token_ids
        assert_all_blocks_free(llm.engine)
    finally:
        llm.shutdown()
