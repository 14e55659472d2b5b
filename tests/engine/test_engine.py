"""Engine behaviour: prefix cache, limits, abort, sampling, stop conditions."""

import dataclasses

import pytest
import torch

from tandem.engine.engine import Engine
from tandem.errors import InvalidRequest, PromptTooLong
from tandem.types import FinishReason, RequestContext
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens


def test_shared_prefix_hits_cache_and_keeps_output(llama_dir, make_engine):
    shared = prompts(1, seed=7, min_len=40, max_len=40)[0]
    first, second = shared + [11, 12, 13], shared + [21, 22]
    cached = make_engine(llama_dir)
    run(cached, [request(first)])
    out = run(cached, [r := request(second, max_tokens=10)])[r.request_id]
    # 40 shared tokens = 10 full blocks of 4
    assert out[-1].num_cached_tokens == 40
    plain = make_engine(llama_dir, prefix_caching=False)
    ref = run(plain, [p := request(second, max_tokens=10)])[p.request_id]
    assert ref[-1].num_cached_tokens == 0
    assert tokens(out) == tokens(ref)
    stats = cached.stats()
    assert stats.prefix_cache_queries == len(first) + len(second)
    assert stats.prefix_cache_hits == 40


def test_salted_requests_do_not_share(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    p = prompts(1, seed=8, min_len=30, max_len=30)[0]
    run(engine, [_salted(p, "a")])
    out = run(engine, [r := _salted(p, "b")])[r.request_id]
    assert out[-1].num_cached_tokens == 0
    out = run(engine, [r := _salted(p, "a")])[r.request_id]
    assert out[-1].num_cached_tokens == 28


def _salted(prompt, salt, tenant=None, share=False):
    r = request(prompt, max_tokens=2)
    r.context = RequestContext(cache_salt=salt, tenant=tenant, share_prefix_cache=share)
    return r


def test_tenants_do_not_share_unless_the_operator_shares_prefixes(llama_dir, make_engine):
    """The tenant partitions the prefix cache like a salt: tenant B's first send of A's prompt is
    a miss, A's second a hit, output unchanged; with share_prefix_cache the tenant drops out of the
    hash (a salt still separates)."""
    engine = make_engine(llama_dir)
    p = prompts(1, seed=18, min_len=30, max_len=30)[0]
    first = run(engine, [r := _salted(p, None, "key-0")])[r.request_id]
    other = run(engine, [r := _salted(p, None, "key-1")])[r.request_id]
    again = run(engine, [r := _salted(p, None, "key-0")])[r.request_id]
    assert [o[-1].num_cached_tokens for o in (first, other, again)] == [0, 0, 28]
    assert tokens(first) == tokens(other) == tokens(again)
    shared = make_engine(llama_dir)
    run(shared, [_salted(p, None, "key-0", share=True)])
    assert run(shared, [r := _salted(p, None, "key-1", share=True)])[r.request_id][-1].num_cached_tokens == 28
    assert run(shared, [r := _salted(p, "s", "key-1", share=True)])[r.request_id][-1].num_cached_tokens == 0
    assert_all_blocks_free(engine)
    assert_all_blocks_free(shared)


def test_too_long_prompts_are_refused(llama_dir, make_engine):
    engine = make_engine(llama_dir, num_blocks=8)
    with pytest.raises(PromptTooLong) as exc:
        engine.add_request(request([5] * 40))  # 8 blocks of 4 hold 32 tokens
    assert "KV cache" in exc.value.message and exc.value.status == 400
    big = make_engine(llama_dir)
    with pytest.raises(PromptTooLong, match="context"):
        big.add_request(request([5] * 2048))
    with pytest.raises(InvalidRequest) as exc:
        big.add_request(request([]))
    assert exc.value.param == "prompt"
    with pytest.raises(InvalidRequest):
        big.add_request(request([100_000]))


def test_abort_frees_blocks_within_a_step(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    reqs = [request(p, max_tokens=50) for p in prompts(3, seed=9)]
    for r in reqs:
        engine.add_request(r)
    engine.step()
    engine.step()
    delta = engine.abort(reqs[1].request_id)
    assert delta.finished and delta.finish_reason is FinishReason.ABORT
    assert reqs[1].request_id not in engine.kv._blocks
    while engine.has_work():
        engine.step()


def test_max_tokens_stop_token_and_min_tokens(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    p = prompts(1, seed=10)[0]
    free = tokens(run(engine, [r := request(p, max_tokens=8)])[r.request_id])
    assert len(free) == 8
    stop_at = free[3]
    out = run(engine, [r := request(p, max_tokens=8, stop_token_ids=(stop_at,))])[r.request_id]
    first = free.index(stop_at)
    assert tokens(out) == free[:first + 1] and out[-1].finish_reason is FinishReason.STOP
    out = run(engine, [r := request(p, max_tokens=8, stop_token_ids=(stop_at,), min_tokens=first + 2)])
    assert len(tokens(out[r.request_id])) > first + 1


def test_stop_string_truncates_text(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    p = prompts(1, seed=11)[0]
    full = run(engine, [r := request(p, max_tokens=12)])[r.request_id]
    text = "".join(d.new_text for d in full)
    assert len(text) > 6
    stop = text[3:6]
    out = run(engine, [r := request(p, max_tokens=12, stop=(stop,))])[r.request_id]
    got = "".join(d.new_text for d in out)
    assert got == text[:text.index(stop)] and out[-1].finish_reason is FinishReason.STOP


def test_seeded_sampling_is_reproducible_in_any_batch(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    p = prompts(1, seed=12)[0]
    params = dict(max_tokens=10, temperature=1.0, seed=1234, ignore_eos=True)
    alone = tokens(run(engine, [r := request(p, **params)])[r.request_id])
    others = [request(q, max_tokens=10, temperature=1.0, ignore_eos=True) for q in prompts(4, seed=13)]
    batch = run(engine, others + [r := request(p, **params)])
    assert tokens(batch[r.request_id]) == alone
    unseeded = [tokens(run(engine, [u := request(p, max_tokens=10, temperature=1.0)])[u.request_id])
                for _ in range(3)]
    assert any(u != alone for u in unseeded)


def test_engine_seed_makes_unseeded_sampling_reproducible(llama_dir):
    """--seed (EngineConfig.seed) seeds torch's generator as the engine starts: the same unseeded
    request sampled by two engines of the same seed gives the same tokens, another seed others."""
    p = prompts(1, seed=15)[0]

    def sample(seed):
        engine = Engine.from_config(dataclasses.replace(engine_config(llama_dir), seed=seed))
        try:
            out = tokens(run(engine, [r := request(p, max_tokens=16, temperature=1.0)])[r.request_id])
            assert_all_blocks_free(engine)
            return out
        finally:
            engine.shutdown()

    first = sample(7)
    assert sample(7) == first
    assert sample(8) != first


def test_logprobs_reported_per_token(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    out = run(engine, [r := request(prompts(1, seed=14)[0], max_tokens=4, logprobs=3)])[r.request_id]
    lps = [lp for d in out for lp in (d.logprobs or [])]
    assert len(lps) == 4
    for lp, tok in zip(lps, tokens(out)):
        assert lp.token_id == tok and lp.logprob <= 0 and len(lp.top) == 3
        assert lp.top[0][1] >= lp.logprob - 1e-6  # greedy: the sampled token is the best


def test_stats_count_tokens_and_usage(llama_dir, make_engine):
    engine = make_engine(llama_dir)
    ps = prompts(2, seed=15)
    run(engine, [request(p, max_tokens=5) for p in ps])
    s = engine.stats()
    assert s.prompt_tokens == sum(map(len, ps)) and s.generation_tokens == 10
    assert s.num_running == 0 and s.num_waiting == 0 and s.kv_cache_usage == 0.0


def test_load_figures_count_a_prompt_as_prefill_until_its_first_token(llama_dir, make_engine):
    """What a gateway tracks: uncomputed prompt tokens are prefill load, and a context counts as
    decode load only once the first token is out (never both for one request)."""
    engine = make_engine(llama_dir, max_num_batched_tokens=16)
    prompt = prompts(1, seed=16, min_len=40, max_len=40)[0]
    engine.add_request(r := request(prompt, max_tokens=3))
    engine.step()  # the first 16-token chunk
    s = engine.stats()
    assert (s.waiting_prefill_tokens, s.running_context_tokens) == (24, 0)
    engine.step()
    engine.step()  # the last chunk, and the first token
    s = engine.stats()
    assert (s.waiting_prefill_tokens, s.running_context_tokens) == (0, 41)
    for _ in range(3):
        engine.step()
    assert r.request_id not in engine.requests
    s = engine.stats()
    assert (s.waiting_prefill_tokens, s.running_context_tokens) == (0, 0)


def test_packed_bfloat16_weights_give_the_same_greedy_tokens(llama_dir):
    """CPU bfloat16 loads pack the linear weights (oneDNN layout); outputs must not change."""
    import dataclasses

    from tandem.engine.engine import Engine
    from tandem.layers.linear import Linear, can_pack
    from tests.conftest import assert_all_blocks_free, engine_config

    if not can_pack(torch.bfloat16, torch.device("cpu")):
        pytest.skip("this torch has no oneDNN ops")
    outs = []
    for pack in (True, False):
        cfg = engine_config(llama_dir, dtype="bfloat16", device="cpu")   # the CPU's packed weights
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, pack_weights=pack))
        engine = Engine.from_config(cfg)
        reqs = [request(p, max_tokens=12) for p in prompts(6, seed=21)]
        res = run(engine, reqs)   # may start while the weights are still being packed
        engine.loaded.wait_packed()
        linears = [m for m in engine.loaded.model.modules() if isinstance(m, Linear)]
        assert all((m.packed_weight is not None) == pack for m in linears)
        assert pack == (engine.loaded.packing is not None) and getattr(engine.loaded.packing, "error", None) is None
        outs.append([tokens(res[r.request_id]) for r in reqs])
        assert_all_blocks_free(engine)
        engine.shutdown()
    assert outs[0] == outs[1]


def test_native_decode_attention_gives_the_sdpa_greedy_tokens(llama_dir):
    """CPU decode attention runs the native kernel by default; greedy outputs equal torch SDPA's."""
    import dataclasses

    from tandem.engine.engine import Engine
    from tandem.kernels.paged_decode import PagedDecodeKernel
    from tests.conftest import assert_all_blocks_free, engine_config

    outs = []
    for attention in ("auto", "sdpa"):
        cfg = engine_config(llama_dir, device="cpu")   # the CPU's native kernel
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, attention=attention))
        engine = Engine.from_config(cfg)
        kernel = engine.loaded.model.workspace.decode_kernel
        assert isinstance(kernel, PagedDecodeKernel) if attention == "auto" else kernel is None
        reqs = [request(p, max_tokens=24) for p in prompts(8, seed=5)]
        res = run(engine, reqs)
        outs.append([tokens(res[r.request_id]) for r in reqs])
        assert_all_blocks_free(engine)
        engine.shutdown()
    assert outs[0] == outs[1]


def test_amx_prefill_greedy_tokens_do_not_depend_on_chunks_or_the_prefix_cache(tmp_path):
    """bfloat16 prefill runs the AMX kernel where the CPU has it. Each query row's attention is
    computed in the same order however the prompt is split, so greedy outputs with the prefix
    cache and small chunks equal those without the cache in one chunk."""
    import dataclasses

    from tandem.engine.engine import Engine
    from tandem.kernels.paged_prefill import PagedPrefillKernel
    from tandem.testing.tiny_model import write_test_model
    from tests.conftest import assert_all_blocks_free, engine_config

    if PagedPrefillKernel.load() is None:
        pytest.skip("this CPU has neither AMX tiles nor AVX-512 BF16")
    model_dir = write_test_model(tmp_path, "LlamaForCausalLM", hidden_size=128, num_heads=4,
                                 num_kv_heads=2, head_dim=32, seed=4)
    shared = prompts(1, seed=8, min_len=150, max_len=150)[0]
    suffixes = prompts(6, seed=9, min_len=5, max_len=70)
    outs = []
    for caching, budget in ((True, 48), (False, 512)):
        cfg = engine_config(model_dir, dtype="bfloat16", block_size=16, prefix_caching=caching, device="cpu",
                            max_num_batched_tokens=budget)
        engine = Engine.from_config(cfg)
        assert isinstance(engine.loaded.model.workspace.prefill_kernel, PagedPrefillKernel)
        first = request(shared + suffixes[0], max_tokens=16)
        res = run(engine, [first])                            # caches the shared prefix
        rest = [request(shared + s, max_tokens=16) for s in suffixes[1:]]
        res.update(run(engine, rest))
        assert all((res[r.request_id][-1].num_cached_tokens >= 144) == caching for r in rest)
        outs.append([tokens(res[r.request_id]) for r in [first, *rest]])
        assert_all_blocks_free(engine)
        engine.shutdown()
    assert outs[0] == outs[1]
