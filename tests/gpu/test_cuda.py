"""The CUDA paths, on a machine with a GPU (skipped without one; CI has none): one engine on a GPU
gives the CPU's greedy tokens for every architecture, bfloat16 on a GPU scores prompts as
float32 does within bfloat16's precision, KV hands over between a CPU worker and a GPU worker in
both directions, and a tensor-parallel worker over NCCL (one GPU per rank) equals one process.
The engine, parallel and spec suites also run on a GPU with TANDEM_TEST_DEVICE=cuda (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tandem.engine.engine import Engine
from tandem.parallel.config import ParallelConfig
from tandem.parallel.launch import parallel_engine
from tandem.testing.tiny_model import write_test_model
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import (check_decode_after_handoff, handoff_pair, prompts, request, run,
                                 settle_handoffs, tokens)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ARCHS = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM", "MixtralForCausalLM",
         "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"]


def _greedy(engine, ps, n=8):
    reqs = [request(p, max_tokens=n) for p in ps]
    out = run(engine, reqs)
    return [tokens(out[r.request_id]) for r in reqs]


@pytest.mark.parametrize("arch", ARCHS)
def test_one_engine_on_cuda_gives_the_cpus_greedy_tokens(tmp_path, make_engine, arch):
    path = write_test_model(tmp_path, arch, seed=41, num_layers=3)
    ps = prompts(6, seed=42, min_len=5, max_len=40)
    want = _greedy(make_engine(path, device="cpu"), ps)
    gpu = make_engine(path, device="cuda", max_num_batched_tokens=24)
    assert gpu.runner.kv_cache.device.type == "cuda"
    assert _greedy(gpu, ps) == want
    assert _greedy(gpu, ps[:3]) == want[:3]           # again, from the prefix cache
    assert gpu.stats().prefix_cache_hits > 0


def _prompt_logprobs(engine, prompt):
    r = request(prompt, max_tokens=1, prompt_logprobs=0)
    (delta,) = run(engine, [r])[r.request_id]
    return torch.tensor([t.logprob for t in delta.prompt_logprobs])


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "DeepseekV3ForCausalLM"])
def test_bfloat16_on_cuda_scores_prompts_as_float32_does(tmp_path, make_engine, arch):
    path = write_test_model(tmp_path, arch, seed=43)
    f32, bf16 = make_engine(path, device="cuda"), make_engine(path, device="cuda", dtype="bfloat16")
    for prompt in prompts(3, seed=44, min_len=20, max_len=40):
        a, b = _prompt_logprobs(f32, prompt), _prompt_logprobs(bf16, prompt)
        assert a.shape == b.shape == (len(prompt) - 1,)
        d = (a - b).abs()
        # MoE routing can pick another expert at a near-tie in bfloat16: a few positions move more
        assert d.median() < 0.02 and (d < 0.1).float().mean() >= 0.9, d


@pytest.mark.parametrize("prefill_device,decode_device", [("cpu", "cuda"), ("cuda", "cpu"), ("cuda", "cuda")])
def test_kv_hands_over_between_cpu_and_gpu_workers(tmp_path, make_engine, prefill_device, decode_device):
    path = write_test_model(tmp_path, "Qwen3ForCausalLM", seed=45)
    single = make_engine(path, device="cpu")

    def worker(role, device):
        return Engine.from_config(dataclasses.replace(engine_config(path, role=role, device=device),
                                                      kv_transport="tcp"))

    prefill = worker("prefill", prefill_device)
    decode = worker("decode", decode_device)
    with handoff_pair(prefill, decode):
        for prompt in prompts(3, seed=46, min_len=9, max_len=40):
            ref = tokens(run(single, [r := request(prompt, max_tokens=10)])[r.request_id])
            check_decode_after_handoff(prefill, decode, prompt, ref)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs a GPU per rank")
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "DeepseekV3ForCausalLM"])
def test_tensor_parallel_2_over_nccl_equals_1(tmp_path, make_engine, arch):
    path = write_test_model(tmp_path, arch, seed=47)
    ps = prompts(4, seed=48, min_len=5, max_len=30)
    want = _greedy(make_engine(path, device="cuda"), ps)
    pcfg = ParallelConfig(tensor_parallel_size=2, distributed_backend="nccl")
    engine = parallel_engine(dataclasses.replace(engine_config(path, device="cuda"), num_threads=1), pcfg)
    try:
        assert _greedy(engine, ps) == want
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("role", ["both", "prefill"])
def test_a_one_rank_worker_over_nccl_steps_and_hands_over(tmp_path, make_engine, role):
    """NCCL's start-up, the step broadcasts and (prefill) the gather of the cache handles, on one GPU:
    NCCL refuses two ranks on one device, so with one GPU they run with one rank."""
    path = write_test_model(tmp_path, "Qwen3ForCausalLM", seed=49)
    single = make_engine(path, device="cuda")
    cfg = dataclasses.replace(engine_config(path, role=role, device="cuda"), num_threads=1,
                              kv_transport=None if role == "both" else "tcp")
    engine = parallel_engine(cfg, ParallelConfig(distributed_backend="nccl"))
    decode = Engine.from_config(dataclasses.replace(engine_config(path, role="decode", device="cuda"),
                                                    kv_transport="tcp"))
    try:
        import torch.distributed as dist
        assert dist.get_backend() == "nccl"
        ps = prompts(3, seed=50, min_len=9, max_len=30)
        refs = _greedy(single, ps)
        if role == "both":
            assert _greedy(engine, ps) == refs
        else:
            for prompt, ref in zip(ps, refs):
                check_decode_after_handoff(engine, decode, prompt, ref)
            settle_handoffs(engine)
        assert_all_blocks_free(engine)
        assert_all_blocks_free(decode)
    finally:
        engine.shutdown()
        decode.shutdown()


@pytest.mark.parametrize("draft", [False, True])
def test_the_kv_cache_takes_the_share_of_gpu_memory_that_is_left(tmp_path, draft):
    """No --kv-cache-memory on a GPU: weights, a step's activations and the cache (a draft model's
    too) stay within --gpu-memory-utilization of the GPU's memory, and the cache takes most of it."""
    from tandem.config import SpeculativeConfig

    path = write_test_model(tmp_path, "LlamaForCausalLM", seed=51)
    cfg = engine_config(path, device="cuda", num_blocks=None, max_num_batched_tokens=2048)
    share = 0.05
    cfg = dataclasses.replace(cfg, cache=dataclasses.replace(cfg.cache, gpu_memory_utilization=share))
    if draft:
        cfg = dataclasses.replace(cfg, speculative=SpeculativeConfig(method="draft_model", model=str(path),
                                                                     num_speculative_tokens=3))
    _, total = torch.cuda.mem_get_info()
    engine = Engine.from_config(cfg)
    try:
        held = torch.cuda.memory_allocated()
        cache = engine.num_blocks * engine.layout.block_nbytes
        assert engine.config.cache.num_blocks == engine.num_blocks
        assert held <= share * total
        # a draft as large as the target (this one) leaves the target half
        assert cache >= (0.4 if draft else 0.8) * share * total, (cache, share * total)
        assert _greedy(engine, prompts(2, seed=52, min_len=5, max_len=30)) \
            == _greedy(Engine.from_config(engine_config(path, device="cpu")), prompts(2, seed=52, min_len=5, max_len=30))
    finally:
        engine.shutdown()
