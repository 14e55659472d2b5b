"""Prefill on one engine, decode on another, KV handed over by each transport: the greedy
output equals one engine's, and every block on both sides is free afterwards."""

import dataclasses

import pytest

from tandem.engine.engine import Engine
from tandem.errors import InvalidRequest
from tandem.kv.layout import KVLayout
from tandem.types import KV_HANDOFF_BUCKETS, EngineRequest, KVHandle
from tests.conftest import assert_all_blocks_free, engine_config, shm_safe_device
from tests.engine.helpers import handoff_pair, prompts, request, run, tokens


def _pair(model_dir, kind, **kw):
    kw.setdefault("device", shm_safe_device(kind))
    prefill = Engine.from_config(dataclasses.replace(
        engine_config(model_dir, role="prefill", **kw), kv_transport=kind))
    decode = Engine.from_config(dataclasses.replace(
        engine_config(model_dir, role="decode", **kw), kv_transport=kind))
    return prefill, decode


def _disaggregated(prefill, decode, prompt, max_tokens):
    first = request(prompt, max_tokens=max_tokens, prefill_only=True)
    pre = run(prefill, [first])[first.request_id]
    assert len(pre) == 1 and pre[0].finished and pre[0].finish_reason is None
    handle = pre[0].kv_handle
    assert handle.num_tokens == len(prompt) and handle.block_ids
    second = EngineRequest(f"{first.request_id}-d", list(prompt), first.sampling, kv_handle=handle,
                           resume_output_ids=list(pre[0].new_token_ids))
    out = run(decode, [second])[second.request_id]
    return pre[0].new_token_ids + tokens(out), pre, out


@pytest.mark.parametrize("kind", ["tcp", "shm", "mooncake"])
def test_greedy_identity_across_the_handoff(llama_dir, make_engine, kind):
    if kind == "mooncake":
        pytest.importorskip("mooncake.engine", reason="mooncake wheel is installed by make test")
    single = make_engine(llama_dir)
    prefill, decode = _pair(llama_dir, kind)
    with handoff_pair(prefill, decode):
        for prompt in prompts(3, seed=30, min_len=5, max_len=50):
            ref = tokens(run(single, [r := request(prompt, max_tokens=9)])[r.request_id])
            got, pre, out = _disaggregated(prefill, decode, prompt, 9)
            assert got == ref
            assert out[-1].num_output_tokens == 9
        # each pull timed on the decode side (tandem:kv_handoff_seconds), none on the prefill side
        n = len(KV_HANDOFF_BUCKETS) + 1
        timed = decode.stats().kv_handoff_stats
        assert sum(timed[:n]) == 3 and timed[n] > 0 and timed[n + 1] == 0
        assert sum(prefill.stats().kv_handoff_stats[:n]) == 0


def test_decode_pulls_only_blocks_it_lacks(llama_dir):
    prefill, decode = _pair(llama_dir, "tcp")
    with handoff_pair(prefill, decode):
        shared = prompts(1, seed=31, min_len=24, max_len=24)[0]
        run(decode, [request(shared + [7, 8, 9], max_tokens=2)])  # decode side caches 6 blocks
        got, pre, out = _disaggregated(prefill, decode, shared + [40, 41], 5)
        assert decode.stats().prefix_cache_hits >= 24


def test_pull_failure_falls_back_to_recompute(llama_dir, make_engine):
    single = make_engine(llama_dir)
    prefill, decode = _pair(llama_dir, "tcp")
    try:
        prompt = prompts(1, seed=32, min_len=30, max_len=30)[0]
        ref = tokens(run(single, [r := request(prompt, max_tokens=6)])[r.request_id])
        first = request(prompt, max_tokens=6, prefill_only=True)
        pre = run(prefill, [first])[first.request_id][0]
        prefill.shutdown()  # the prefill worker dies before the pull
        second = EngineRequest("after-death", list(prompt), first.sampling, kv_handle=pre.kv_handle,
                               resume_output_ids=list(pre.new_token_ids))
        out = run(decode, [second])[second.request_id]
        assert pre.new_token_ids + tokens(out) == ref
        assert decode.stats().kv_handoff_stats[-1] == 1    # the failed pull, counted
        assert_all_blocks_free(decode)
    finally:
        decode.shutdown()


def test_layout_mismatch_is_a_clear_error(llama_dir, qwen3_dir):
    prefill, _ = _pair(llama_dir, "tcp")
    _, decode = _pair(qwen3_dir, "tcp")
    try:
        first = request(prompts(1, seed=33)[0], max_tokens=4, prefill_only=True)
        pre = run(prefill, [first])[first.request_id][0]
        bad = EngineRequest("x", first.prompt_token_ids, first.sampling, kv_handle=pre.kv_handle,
                            resume_output_ids=list(pre.new_token_ids))
        with pytest.raises(Exception, match="KV layouts differ.*model"):
            decode.add_request(bad)
        fp8_decode = Engine.from_config(dataclasses.replace(  # the same model with a 1-byte cache
            engine_config(llama_dir, role="decode", kv_cache_dtype="fp8_e5m2"), kv_transport="tcp"))
        try:
            with pytest.raises(Exception, match="KV layouts differ.*dtype"):
                fp8_decode.add_request(bad)
            assert_all_blocks_free(fp8_decode)
        finally:
            fp8_decode.shutdown()
        wrong_len = dataclasses.replace(pre.kv_handle, num_tokens=pre.kv_handle.num_tokens + 3)
        with pytest.raises(InvalidRequest):
            prefill_like = EngineRequest("y", first.prompt_token_ids, first.sampling,
                                         kv_handle=wrong_len, resume_output_ids=list(pre.new_token_ids))
            _pair_decode_check(llama_dir, prefill_like)
    finally:
        prefill.shutdown()
        decode.shutdown()


def _pair_decode_check(model_dir, req):
    _, decode = _pair(model_dir, "tcp")
    try:
        decode.add_request(req)
    finally:
        decode.shutdown()


def test_handoff_survives_as_dict(llama_dir):
    layout = KVLayout("m", "float32", 4, 2, 2, 16)
    h = KVHandle("127.0.0.1:1", "r", (1, 2), 7, layout.to_dict(), (3, 4), "tcp")
    assert KVHandle.from_dict(h.to_dict()) == h
