"""A worker spread over 2 ranks (gloo, 2 processes) gives the same greedy tokens as one process:
TP 2 (dense, MoE and MLA models), EP 2 (MoE; all-reduce or all-to-all dispatch), PP 2; and a rank that dies takes the worker down
without a hang."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest
import torch

from tandem.config import SpeculativeConfig
from tandem.parallel.config import ParallelConfig
from tandem.parallel.launch import parallel_engine
from tandem.parallel.runner import RankFailed
from tandem.testing.tiny_model import write_test_model
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens

torch.set_num_threads(1)


def _config(path, **kw):
    return dataclasses.replace(engine_config(path, **kw), num_threads=1)   # each rank: one thread


def _greedy(engine, ps, n=6):
    reqs = [request(p, max_tokens=n) for p in ps]
    out = run(engine, reqs)
    return [tokens(out[r.request_id]) for r in reqs]


def _check(model_dir, pcfg, make_engine, **kw):
    ps = prompts(4, seed=21, min_len=5, max_len=30)
    want = _greedy(make_engine(model_dir, **kw), ps)
    engine = parallel_engine(_config(model_dir, max_num_batched_tokens=24, **kw), pcfg)
    try:
        assert _greedy(engine, ps) == want
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "MixtralForCausalLM", "Qwen3MoeForCausalLM",
                                  "DeepseekV3ForCausalLM"])
def test_tensor_parallel_2_equals_1(tmp_path, make_engine, arch):
    _check(write_test_model(tmp_path, arch, seed=13), ParallelConfig(tensor_parallel_size=2), make_engine)


@pytest.mark.parametrize("arch", ["MixtralForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"])
def test_expert_parallel_2_equals_1(tmp_path, make_engine, arch):
    pcfg = ParallelConfig(tensor_parallel_size=2, enable_expert_parallel=True)
    _check(write_test_model(tmp_path, arch, seed=14), pcfg, make_engine)


@pytest.mark.parametrize("arch", ["MixtralForCausalLM", "DeepseekV3ForCausalLM"])
def test_expert_parallel_all_to_all_equals_all_reduce(tmp_path, make_engine, arch):
    """Token dispatch and combine give the all-reduce version's tokens (and one process's),
    batches of 1 to 4 sequences: a rank may own no token of a step."""
    path = write_test_model(tmp_path, arch, seed=14)
    ps = prompts(4, seed=22, min_len=5, max_len=30)
    want = _greedy(make_engine(path), ps) + _greedy(make_engine(path), ps[:1], n=4)
    for dispatch in ("allreduce", "alltoall"):
        pcfg = ParallelConfig(tensor_parallel_size=2, enable_expert_parallel=True, expert_dispatch=dispatch)
        engine = parallel_engine(_config(path, max_num_batched_tokens=24), pcfg)
        try:
            assert _greedy(engine, ps) + _greedy(engine, ps[:1], n=4) == want, dispatch
            assert_all_blocks_free(engine)
        finally:
            engine.shutdown()


def test_all_to_all_needs_expert_parallel():
    with pytest.raises(ValueError, match="enable_expert_parallel"):
        ParallelConfig(tensor_parallel_size=2, expert_dispatch="alltoall")


@pytest.mark.parametrize("arch", ["Qwen3ForCausalLM", "MixtralForCausalLM", "Qwen3MoeForCausalLM",
                                  "DeepseekV3ForCausalLM"])
def test_pipeline_parallel_2_equals_1(tmp_path, make_engine, arch):
    path = write_test_model(tmp_path, arch, seed=15, num_layers=3)
    _check(path, ParallelConfig(pipeline_parallel_size=2), make_engine)


def test_a_dead_rank_takes_the_worker_down(tmp_path):
    path = write_test_model(tmp_path, seed=16)
    deaths: list[str] = []
    engine = parallel_engine(_config(path), ParallelConfig(tensor_parallel_size=2),
                             on_rank_death=deaths.append)
    try:
        assert _greedy(engine, prompts(1, seed=3), n=2)
        import multiprocessing
        (child,) = multiprocessing.active_children()
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not deaths and time.monotonic() < deadline:
            time.sleep(0.05)
        assert deaths and "tandem-rank-1 exited with code -9" in deaths[0]
        engine.add_request(request(prompts(1, seed=4)[0], max_tokens=2))
        with pytest.raises(RankFailed, match="tandem-rank-1"):
            engine.step()
    finally:
        engine.fail_all("test over")
        engine.shutdown()


def test_tensor_parallel_2_speculating_in_bfloat16_equals_1_without(tmp_path, make_engine):
    """A speculating TP 2 worker keeps one process's greedy tokens without speculation (every
    rank verifies a draft with rank 0's slices: in bfloat16, single-token decode rows)."""
    path = write_test_model(tmp_path, "LlamaForCausalLM", seed=15)
    ps = [p * 3 for p in prompts(3, seed=23, min_len=4, max_len=8)]   # repeats: n-gram drafts
    want = _greedy(make_engine(path, dtype="bfloat16"), ps, n=12)
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=4, prompt_lookup_min=1, adaptive=False)
    cfg = dataclasses.replace(_config(path, max_num_batched_tokens=64, dtype="bfloat16"), speculative=spec)
    engine = parallel_engine(cfg, ParallelConfig(tensor_parallel_size=2))
    try:
        assert _greedy(engine, ps, n=12) == want
        assert engine.stats().spec_num_draft_tokens > 0
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()
