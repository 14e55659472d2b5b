"""The prefill/decode handoff across parallel layouts: MLA's latent cache is the same on every
TP rank, so a TP 2 prefill worker hands it block by block to a TP 1 decode worker (and no block
stays held); a dense model's TP 2 cache holds half the KV heads per rank, which a TP 1 decode
worker refuses with a clear layout error."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tandem.engine.engine import Engine
from tandem.errors import KVLayoutMismatch
from tandem.parallel.config import ParallelConfig
from tandem.parallel.launch import parallel_engine
from tandem.testing.tiny_model import write_test_model
from tandem.types import EngineRequest
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens


def _pd(path):
    prefill = parallel_engine(dataclasses.replace(engine_config(path, role="prefill"), kv_transport="tcp",
                                                  num_threads=1), ParallelConfig(tensor_parallel_size=2))
    decode = Engine.from_config(dataclasses.replace(engine_config(path, role="decode"), kv_transport="tcp"))
    return prefill, decode


def _prefill(prefill, prompt, n):
    first = request(prompt, max_tokens=n, prefill_only=True)
    pre = run(prefill, [first])[first.request_id]
    return first, pre[0]


def test_tp2_prefill_hands_mla_latents_to_tp1_decode(tmp_path, make_engine):
    path = write_test_model(tmp_path, "DeepseekV3ForCausalLM", seed=17)
    single = make_engine(path)
    prefill, decode = _pd(path)
    try:
        assert prefill.layout == decode.layout
        for prompt in prompts(2, seed=32, min_len=9, max_len=30):
            ref = tokens(run(single, [r := request(prompt, max_tokens=6)])[r.request_id])
            first, last = _prefill(prefill, prompt, 6)
            second = EngineRequest(f"{first.request_id}-d", list(prompt), first.sampling,
                                   kv_handle=last.kv_handle, resume_output_ids=list(last.new_token_ids))
            out = run(decode, [second])[second.request_id]
            assert last.new_token_ids + tokens(out) == ref
        deadline = time.monotonic() + 10
        while prefill.scheduler.kept and time.monotonic() < deadline:
            prefill.step()
            time.sleep(0.01)
        assert_all_blocks_free(prefill)
        assert_all_blocks_free(decode)
    finally:
        prefill.shutdown()
        decode.shutdown()


def test_dense_tp2_to_tp1_handoff_is_a_clear_layout_error(tmp_path):
    path = write_test_model(tmp_path, "LlamaForCausalLM", seed=18)
    prefill, decode = _pd(path)
    try:
        prompt = prompts(1, seed=33, min_len=9, max_len=12)[0]
        first, last = _prefill(prefill, prompt, 4)
        second = EngineRequest(f"{first.request_id}-d", list(prompt), first.sampling,
                               kv_handle=last.kv_handle, resume_output_ids=list(last.new_token_ids))
        with pytest.raises(KVLayoutMismatch, match="num_kv_heads: 1 here vs 2 there"):
            decode.add_request(second)
        prefill.abort(first.request_id)
    finally:
        prefill.shutdown()
        decode.shutdown()


def test_a_parallel_decode_worker_is_refused(tmp_path):
    path = write_test_model(tmp_path, "DeepseekV3ForCausalLM", seed=19)
    with pytest.raises(ValueError, match="no --role decode"):
        parallel_engine(dataclasses.replace(engine_config(path, role="decode"), kv_transport="tcp"),
                        ParallelConfig(tensor_parallel_size=2))
