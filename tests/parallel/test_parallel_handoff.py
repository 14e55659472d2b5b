"""The prefill/decode handoff across parallel layouts: a TP 2 prefill worker hands a dense
model's KV to a TP 1 decode worker and a TP 1 prefill worker to a TP 2 decode worker (each rank's
KV heads pulled into the right rank), PP 2 and MLA too (one side with ranks per test: a process
joins one torch.distributed group), greedy-identical to one process and with
no block held afterwards on either side; layouts that cannot be converted (another model, another
dtype) are clear errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tandem.engine.engine import Engine
from tandem.errors import KVLayoutMismatch
from tandem.parallel.config import ParallelConfig
from tandem.parallel.launch import parallel_engine
from tandem.testing.tiny_model import write_test_model
from tandem.types import EngineRequest
from tests.conftest import assert_all_blocks_free, engine_config, shm_safe_device
from tests.engine.helpers import prompts, request, run, settle_handoffs, tokens

torch.set_num_threads(1)

TP2 = ParallelConfig(tensor_parallel_size=2)


def _worker(path, role, pcfg, kind="tcp", **kw):
    kw.setdefault("device", shm_safe_device(kind))
    cfg = dataclasses.replace(engine_config(path, role=role, **kw), kv_transport=kind, num_threads=1)
    return Engine.from_config(cfg) if pcfg is None else parallel_engine(cfg, pcfg)


def _handoff(prefill, decode, prompt, n):
    """Prefill `prompt` on one worker, decode the rest on the other: every token."""
    first = request(prompt, max_tokens=n, prefill_only=True)
    last = run(prefill, [first])[first.request_id][0]
    second = EngineRequest(f"{first.request_id}-d", list(prompt), first.sampling,
                           kv_handle=last.kv_handle, resume_output_ids=list(last.new_token_ids))
    return last.new_token_ids + tokens(run(decode, [second])[second.request_id])


@pytest.mark.parametrize("arch,prefill_pcfg,decode_pcfg,kind", [
    ("LlamaForCausalLM", TP2, None, "tcp"),
    ("LlamaForCausalLM", None, TP2, "tcp"),
    ("Qwen3ForCausalLM", TP2, None, "shm"),
    ("Qwen3ForCausalLM", ParallelConfig(pipeline_parallel_size=2), None, "tcp"),
    ("DeepseekV3ForCausalLM", TP2, None, "tcp"),
    ("DeepseekV3ForCausalLM", None, TP2, "shm"),
])
def test_handoff_across_parallel_layouts_is_greedy_identical(tmp_path, make_engine, arch, prefill_pcfg,
                                                             decode_pcfg, kind):
    path = write_test_model(tmp_path, arch, seed=17, num_layers=3)
    single = make_engine(path)
    prefill = _worker(path, "prefill", prefill_pcfg, kind)
    try:
        decode = _worker(path, "decode", decode_pcfg, kind)
    except BaseException:
        prefill.shutdown()
        raise
    try:
        assert prefill.connector.scheduler.layout == decode.connector.scheduler.layout   # the whole model's
        for prompt in prompts(3, seed=32, min_len=9, max_len=30):
            ref = tokens(run(single, [r := request(prompt, max_tokens=6)])[r.request_id])
            assert _handoff(prefill, decode, prompt, 6) == ref
        settle_handoffs(prefill)
        assert_all_blocks_free(prefill)
        assert_all_blocks_free(decode)
        assert prefill.connector.worker.transport.source.num_pinned() == 0
    finally:
        prefill.shutdown()
        decode.shutdown()


@pytest.mark.parametrize("other", [dict(dtype="bfloat16"), dict(model_seed=99, num_layers=2)])
def test_layouts_that_cannot_be_converted_are_clear_errors(tmp_path, other):
    path = write_test_model(tmp_path / "a", "LlamaForCausalLM", seed=18, num_layers=3)
    dtype = other.get("dtype", "float32")
    other_path = (write_test_model(tmp_path / "b", "LlamaForCausalLM", seed=other["model_seed"],
                                   num_layers=other["num_layers"]) if "model_seed" in other else path)
    prefill = _worker(path, "prefill", TP2)
    decode = _worker(other_path, "decode", None, dtype=dtype)
    try:
        prompt = prompts(1, seed=33, min_len=9, max_len=12)[0]
        first = request(prompt, max_tokens=4, prefill_only=True)
        last = run(prefill, [first])[first.request_id][0]
        second = EngineRequest(f"{first.request_id}-d", list(prompt), first.sampling,
                               kv_handle=last.kv_handle, resume_output_ids=list(last.new_token_ids))
        field = "dtype: 'bfloat16' here vs 'float32' there" if "dtype" in other else "model: "
        with pytest.raises(KVLayoutMismatch, match=field):
            decode.add_request(second)
        prefill.release_kv(first.request_id)
        settle_handoffs(prefill)
        assert_all_blocks_free(prefill)
    finally:
        prefill.shutdown()
        decode.shutdown()


def test_a_parallel_worker_with_kv_tiers_is_refused(tmp_path):
    path = write_test_model(tmp_path, "LlamaForCausalLM", seed=19)
    cfg = engine_config(path)
    cfg = dataclasses.replace(cfg, kv_store=dataclasses.replace(cfg.kv_store, host_bytes=2**20))
    with pytest.raises(ValueError, match="KV store tiers"):
        parallel_engine(cfg, TP2)
