"""An fp8 e5m2 KV cache (CacheConfig.kv_cache_dtype): K/V are stored in one byte and read back
the same way by every attention path, so greedy outputs do not depend on chunking, the prefix
cache, preemption, the attention kernels or a KV handoff; the cache holds twice the blocks of a
bfloat16 one in the same memory; and outputs stay close to the model's own precision."""

import dataclasses

import pytest
import torch

from tandem.config import CacheConfig
from tandem.engine.engine import Engine
from tandem.types import EngineRequest
from tests.conftest import assert_all_blocks_free, engine_config, shm_safe_device
from tests.engine.helpers import prompts, request, run, tokens

FP8 = "fp8_e5m2"


def _greedy(engine, reqs):
    res = run(engine, reqs)
    return [tokens(res[r.request_id]) for r in reqs], res


def _with(cfg, **model):
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model))


def test_unknown_cache_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp8'.*auto, fp8_e5m2"):
        CacheConfig(kv_cache_dtype="fp8")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_cache_stores_one_byte_per_value_and_holds_more_blocks(llama_dir, dtype):
    blocks = {}
    for kv in ("auto", FP8):
        cfg = engine_config(llama_dir, dtype=dtype, kv_cache_dtype=kv)
        cfg = dataclasses.replace(cfg, cache=dataclasses.replace(cfg.cache, num_blocks=None,
                                                                 kv_cache_bytes=4 * 2**20))
        engine = Engine.from_config(cfg)
        try:
            assert engine.runner.kv_cache.dtype == (torch.float8_e5m2 if kv == FP8 else getattr(torch, dtype))
            assert engine.layout.dtype == ("float8_e5m2" if kv == FP8 else dtype)
            blocks[kv] = engine.num_blocks
        finally:
            engine.shutdown()
    assert blocks[FP8] == blocks["auto"] * (4 if dtype == "float32" else 2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_tokens_do_not_depend_on_chunks_the_prefix_cache_or_preemption(llama_dir, dtype):
    shared = prompts(1, seed=40, min_len=40, max_len=40)[0]
    ps = [shared + p for p in prompts(6, seed=41, min_len=3, max_len=30)]
    outs = []
    # prefix cache + 16-token chunks; no cache, one chunk; a cache so small that requests are preempted
    for caching, budget, num_blocks in ((True, 16, 256), (False, 512, 256), (True, 64, 40)):
        engine = Engine.from_config(engine_config(llama_dir, dtype=dtype, kv_cache_dtype=FP8,
                                                  prefix_caching=caching, num_blocks=num_blocks,
                                                  max_num_batched_tokens=budget))
        try:
            first, _ = _greedy(engine, [request(ps[0], max_tokens=12)])
            rest, res = _greedy(engine, [request(p, max_tokens=12) for p in ps[1:]])
            if caching and num_blocks == 256:
                assert all(d[-1].num_cached_tokens >= 40 for d in res.values())
            if num_blocks == 40:
                assert engine.scheduler.num_preemptions > 0
            outs.append(first + rest)
            assert_all_blocks_free(engine)
        finally:
            engine.shutdown()
    assert outs[0] == outs[1] == outs[2]


def test_native_kernels_give_the_sdpa_greedy_tokens(llama_dir):
    outs = []
    for attention in ("auto", "sdpa"):
        engine = Engine.from_config(_with(engine_config(llama_dir, kv_cache_dtype=FP8, device="cpu"),
                                          attention=attention))   # the CPU's native kernels
        try:
            assert (engine.loaded.model.workspace.decode_kernel is None) == (attention == "sdpa")
            outs.append(_greedy(engine, [request(p, max_tokens=16) for p in prompts(6, seed=42)])[0])
            assert_all_blocks_free(engine)
        finally:
            engine.shutdown()
    assert outs[0] == outs[1]


def test_first_token_distribution_stays_close_to_the_models_precision(llama_dir):
    # 2 mantissa bits on K/V move the logits a little, not the distribution's shape
    logprobs = {}
    for kv in ("auto", FP8):
        engine = Engine.from_config(engine_config(llama_dir, kv_cache_dtype=kv))
        try:
            reqs = [request(p, max_tokens=1, logprobs=5) for p in prompts(4, seed=43)]
            res = run(engine, reqs)
            logprobs[kv] = [res[r.request_id][0].logprobs[0] for r in reqs]
        finally:
            engine.shutdown()
    for full, fp8 in zip(logprobs["auto"], logprobs[FP8]):
        full_top = dict(full.top)
        best, best_logprob = fp8.top[0]
        assert best in full_top
        assert abs(full_top[best] - best_logprob) < 0.1


@pytest.mark.parametrize("kind", ["tcp", "shm", "mooncake"])
def test_a_handoff_between_fp8_workers_keeps_greedy_tokens(llama_dir, kind):
    if kind == "mooncake":
        pytest.importorskip("mooncake.engine", reason="mooncake wheel is installed by make test")
    single = Engine.from_config(engine_config(llama_dir, kv_cache_dtype=FP8))
    prefill, decode = (Engine.from_config(dataclasses.replace(
        engine_config(llama_dir, role=role, kv_cache_dtype=FP8, device=shm_safe_device(kind)), kv_transport=kind))
        for role in ("prefill", "decode"))
    try:
        for prompt in prompts(3, seed=44, min_len=5, max_len=50):
            ref = _greedy(single, [request(prompt, max_tokens=8)])[0][0]
            first = request(prompt, max_tokens=8, prefill_only=True)
            pre = run(prefill, [first])[first.request_id][0]
            second = EngineRequest(f"{first.request_id}-d", list(prompt), first.sampling,
                                   kv_handle=pre.kv_handle, resume_output_ids=list(pre.new_token_ids))
            assert pre.new_token_ids + tokens(run(decode, [second])[second.request_id]) == ref
        assert_all_blocks_free(single)
        assert_all_blocks_free(decode)
    finally:
        for engine in (single, prefill, decode):
            engine.shutdown()

