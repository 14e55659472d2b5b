"""Speculative decoding in the engine (tandem/spec): n-gram drafts on repetitive text give exactly
the output of no speculation under greedy and seeded sampling, keep the target's distribution
unseeded, are counted, and work on a decode worker after a handoff."""

from __future__ import annotations

import dataclasses

import torch

from tandem.config import SpeculativeConfig
from tandem.engine.engine import Engine
from tandem.spec.factory import make_proposer
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import check_decode_after_handoff, prompts, request, run, tokens


def _repetitive(n, seed):
    """Prompts that repeat a chunk, as agents resend tool definitions and results."""
    out = []
    for chunk in prompts(n, seed=seed, min_len=6, max_len=14):
        out.append(chunk * 3 + chunk[:2])
    return out


def _spec_engine(make_engine, model_dir, **cfg):
    engine = make_engine(model_dir)
    engine.proposer = make_proposer(SpeculativeConfig("ngram", **cfg))
    return engine


def test_greedy_output_is_identical_and_drafts_are_accepted(llama_dir, make_engine):
    batch = _repetitive(6, seed=70) + prompts(2, seed=71)
    plain = make_engine(llama_dir)
    reqs = [request(p, max_tokens=24) for p in batch]
    ref = run(plain, reqs)
    spec = _spec_engine(make_engine, llama_dir, num_speculative_tokens=4, prompt_lookup_min=1)
    again = [request(p, max_tokens=24) for p in batch]
    res = run(spec, again)
    for r, a in zip(reqs, again):
        assert tokens(res[a.request_id]) == tokens(ref[r.request_id])
    s = spec.stats()
    assert s.spec_num_draft_tokens > 0 and s.spec_num_accepted_tokens > 0
    assert s.spec_num_accepted_tokens <= s.spec_num_draft_tokens
    assert s.spec_accepted_per_pos[0] >= s.spec_accepted_per_pos[-1]
    # fewer steps than tokens: some steps produced several tokens
    assert spec.num_generation_tokens == plain.num_generation_tokens


def test_seeded_sampling_is_identical(llama_dir, make_engine):
    batch = _repetitive(4, seed=72)
    kw = dict(temperature=0.8, seed=11, top_k=8)
    ref = run(make_engine(llama_dir), reqs := [request(p, max_tokens=16, **kw) for p in batch])
    spec = _spec_engine(make_engine, llama_dir, prompt_lookup_min=1)
    res = run(spec, again := [request(p, max_tokens=16, **kw) for p in batch])
    assert [tokens(res[a.request_id]) for a in again] == [tokens(ref[r.request_id]) for r in reqs]


def test_unseeded_sampling_keeps_the_target_distribution(llama_dir, make_engine):
    """Joint distribution of three sampled tokens (top-3 of 512 each: at most 27 cells), 1500
    samples each with and without a draft of the second (then the second and third come out of
    one verify step). A chi-square two-sample test at p = 0.001; the global RNG is seeded, so the
    test is repeatable."""
    prompt = _repetitive(1, seed=73)[0]

    def sample(engine, n):
        torch.manual_seed(5)
        reqs = [request(prompt, max_tokens=3, temperature=1.0, top_k=3) for _ in range(n)]
        res = run(engine, reqs, timeout_s=300)
        return [tuple(tokens(res[r.request_id])) for r in reqs]

    class Greedy:
        """Drafts the reference's greedy tokens: accepted only when the sample agrees."""

        def __init__(self, first, second):
            self.draft = [first, second]

        def propose(self, requests):
            return [self.draft[len(r.output_token_ids):][:1] for r in requests]

        def observe(self, *a):
            pass

        def finished(self, request):
            pass

    greedy = tokens(run(make_engine(llama_dir), [g := request(prompt, max_tokens=2)])[g.request_id])
    plain = sample(make_engine(llama_dir, max_num_seqs=256, num_blocks=4096), 1500)
    spec_engine = make_engine(llama_dir, max_num_seqs=256, num_blocks=4096)
    spec_engine.proposer = Greedy(*greedy)
    spec = sample(spec_engine, 1500)
    assert spec_engine.stats().spec_num_accepted_tokens > 100
    cells = sorted(set(plain) | set(spec))
    assert len(cells) <= 27
    stat = sum((plain.count(c) - spec.count(c)) ** 2 / (plain.count(c) + spec.count(c)) for c in cells)
    df = len(cells) - 1   # critical value at p = 0.001 (Wilson-Hilferty; z = 3.09)
    critical = df * (1 - 2 / (9 * df) + 3.09 * (2 / (9 * df)) ** 0.5) ** 3
    assert stat < critical, (stat, critical, {c: (plain.count(c), spec.count(c)) for c in cells})


def test_speculation_on_a_decode_worker_after_the_handoff(llama_dir, make_engine):
    prompt = _repetitive(1, seed=74)[0]
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=20)])[r.request_id])
    prefill = Engine.from_config(dataclasses.replace(engine_config(llama_dir, role="prefill"), kv_transport="tcp"))
    decode = Engine.from_config(dataclasses.replace(
        engine_config(llama_dir, role="decode"), kv_transport="tcp",
        speculative=SpeculativeConfig("ngram", num_speculative_tokens=4, prompt_lookup_min=1)))
    try:
        check_decode_after_handoff(prefill, decode, prompt, ref)
        assert decode.stats().spec_num_accepted_tokens > 0
        assert_all_blocks_free(decode)
    finally:
        prefill.shutdown()
        decode.shutdown()


def test_engine_from_config_builds_a_draft_model_proposer(llama_dir, make_engine):
    """--speculative-config with method draft_model: the engine's own start-up builds it."""
    prompt = prompts(1, seed=90)[0] * 2
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=12)])[r.request_id])
    cfg = dataclasses.replace(engine_config(llama_dir), speculative=SpeculativeConfig(
        "draft_model", model=str(llama_dir), num_speculative_tokens=3, adaptive=False))
    engine = Engine.from_config(cfg)
    try:
        assert tokens(run(engine, [r := request(prompt, max_tokens=12)])[r.request_id]) == ref
        assert engine.stats().spec_num_accepted_tokens > 0
    finally:
        engine.shutdown()
