"""Greedy output of the engine equals transformers on the same weights, token for token,
alone, batched, with chunked prefill and with preemption."""

from tests.engine.helpers import hf_greedy, prompts, request, run, tokens


def test_one_request(llama_or_qwen3_dir, make_engine):
    engine = make_engine(llama_or_qwen3_dir)
    prompt = prompts(1, seed=3, min_len=20, max_len=20)[0]
    out = run(engine, [request(prompt, max_tokens=12)])
    assert tokens(next(iter(out.values()))) == hf_greedy(llama_or_qwen3_dir, prompt, 12)


def test_sixteen_concurrent_with_chunked_prefill(llama_or_qwen3_dir, make_engine):
    # budget 24 tokens per step: prompts up to 60 tokens are split across steps
    engine = make_engine(llama_or_qwen3_dir, max_num_batched_tokens=24)
    ps = prompts(16, seed=4)
    reqs = [request(p, max_tokens=6 + i % 5) for i, p in enumerate(ps)]
    out = run(engine, reqs)
    for r, p in zip(reqs, ps):
        want = hf_greedy(llama_or_qwen3_dir, p, r.sampling.max_tokens)
        assert tokens(out[r.request_id]) == want, r.request_id


def test_preemption_keeps_outputs(llama_dir, make_engine):
    # 24 blocks of 4 tokens cannot hold 8 requests of ~30 tokens each at once
    engine = make_engine(llama_dir, num_blocks=24, max_num_batched_tokens=64)
    ps = prompts(8, seed=5, min_len=20, max_len=36)
    reqs = [request(p, max_tokens=10) for p in ps]
    out = run(engine, reqs)
    assert engine.scheduler.num_preemptions > 0
    for r, p in zip(reqs, ps):
        assert tokens(out[r.request_id]) == hf_greedy(llama_dir, p, 10)
