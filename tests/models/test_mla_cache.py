"""MLA's KV cache as MLA: the layout names its kind, a handoff between an MLA and a dense
layout is a clear error, the prefill -> decode handoff carries latent blocks greedy-identically,
and the bytes per token against the equivalent dense cache."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from tandem.engine.engine import Engine
from tandem.errors import KVLayoutMismatch
from tandem.kv.layout import KVLayout
from tandem.models.arch import ModelArch
from tandem.models.memory import kv_bytes_per_token
from tandem.testing.tiny_model import write_test_model
from tandem.types import EngineRequest
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens


def test_layout_kind_shapes_and_mismatch():
    mla = KVLayout(model="m", dtype="bfloat16", block_size=16, num_layers=61, num_kv_heads=1, head_dim=576,
                   kind="mla")
    assert mla.block_shape == (61, 1, 16, 1, 576)
    assert mla.block_nbytes == 61 * 16 * 576 * 2
    dense = dataclasses.replace(mla, kind="mha", num_kv_heads=128, head_dim=192)
    with pytest.raises(KVLayoutMismatch, match="kind: 'mla' here vs 'mha' there"):
        mla.check_compatible(dense)
    assert KVLayout.from_dict(mla.to_dict()) == mla
    legacy = {k: v for k, v in dense.to_dict().items() if k != "kind"}   # written before kinds
    assert KVLayout.from_dict(legacy).kind == "mha"
    with pytest.raises(ValueError, match="kind"):
        dataclasses.replace(mla, kind="paged")


def test_bytes_per_token_against_the_dense_equivalent(tmp_path):
    arch = ModelArch.from_dir(write_test_model(tmp_path, "DeepseekV3ForCausalLM"))
    m = arch.mla
    mla = kv_bytes_per_token(arch, torch.bfloat16)
    dense = arch.num_layers * arch.num_heads * (m.qk_head_dim + m.v_head_dim) * 2   # expanded K and V
    assert mla == arch.num_layers * (32 + 8) * 2
    assert dense / mla == pytest.approx(4 * (24 + 16) / 40)


def test_handoff_of_latent_blocks_is_greedy_identical(tmp_path, make_engine):
    path = write_test_model(tmp_path, "DeepseekV3ForCausalLM", seed=12)
    single = make_engine(path)
    prefill = Engine.from_config(dataclasses.replace(engine_config(path, role="prefill"), kv_transport="tcp"))
    decode = Engine.from_config(dataclasses.replace(engine_config(path, role="decode"), kv_transport="tcp"))
    try:
        assert prefill.layout.kind == decode.layout.kind == "mla"
        for prompt in prompts(2, seed=31, min_len=9, max_len=30):
            ref = tokens(run(single, [r := request(prompt, max_tokens=7)])[r.request_id])
            first = request(prompt, max_tokens=7, prefill_only=True)
            pre = run(prefill, [first])[first.request_id]
            second = EngineRequest(f"{first.request_id}-d", list(prompt), first.sampling,
                                   kv_handle=pre[0].kv_handle, resume_output_ids=list(pre[0].new_token_ids))
            out = run(decode, [second])[second.request_id]
            assert pre[0].new_token_ids + tokens(out) == ref
        deadline = time.monotonic() + 10
        while prefill.scheduler.kept and time.monotonic() < deadline:
            prefill.step()
            time.sleep(0.01)
        assert_all_blocks_free(prefill)
        assert_all_blocks_free(decode)
    finally:
        prefill.shutdown()
        decode.shutdown()


def test_fp8_latent_cache_reads_what_it_wrote(tmp_path, make_engine):
    # the latent is rounded to fp8 when written; every path reads it back so, so a prompt gives
    # the same tokens computed whole, in small chunks, or after a prefix-cache hit
    path = write_test_model(tmp_path, "DeepseekV3ForCausalLM", seed=20)
    whole = make_engine(path, kv_cache_dtype="fp8_e5m2", prefix_caching=False)
    chunked = make_engine(path, kv_cache_dtype="fp8_e5m2", max_num_batched_tokens=8)
    assert chunked.runner.kv_cache.dtype == torch.float8_e5m2
    prompt = prompts(1, seed=34, min_len=30, max_len=30)[0]
    want = tokens(run(whole, [r := request(prompt, max_tokens=6)])[r.request_id])
    assert tokens(run(chunked, [r := request(prompt, max_tokens=6)])[r.request_id]) == want
    assert tokens(run(chunked, [r := request(prompt, max_tokens=6)])[r.request_id]) == want   # prefix hit
