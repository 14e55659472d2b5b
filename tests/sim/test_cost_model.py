import pytest

from tandem.sim.cost_model import CostModel
from tandem.sim.hardware import CPU, H100, H200, accelerator
from tandem.sim.model_spec import KIMI_K25, LLAMA512, LLAMA_8B, MODELS, model_spec


def test_model_sizes_match_the_published_ones():
    assert 1.0e12 < KIMI_K25.total_params() < 1.06e12          # "1T total"
    assert 29e9 < KIMI_K25.active_params() < 34e9              # "32B activated" (lm head excluded)
    assert KIMI_K25.kv_bytes_per_token() == (512 + 64) * 61 * 2  # MLA: latent + rope key per layer
    assert 7.9e9 < LLAMA_8B.total_params() < 8.1e9
    assert LLAMA_8B.kv_bytes_per_token() == 2 * 8 * 128 * 32 * 2


def test_step_time_by_hand_for_a_dense_decode():
    # llama512 on an additive cpu with round constants: one stream, one token at context 99
    acc = CPU.scaled(flops=1e9, mem_bw=1e9, step_overhead_s=0.01, seq_overhead_s=0.001)
    m = LLAMA512
    cost = CostModel(m, acc)
    flops = 2 * m.active_params() + 2 * 512 * 4096 + 2 * 8 * 8 * (64 + 64) * 1 * (99 + 1)
    nbytes = m.dense_params() * 2 + 512 * 4096 * 2 + 100 * m.kv_bytes_per_token()
    assert cost.step_time([(1, 99)], sampled=1) == pytest.approx(0.011 + flops / 1e9 + nbytes / 1e9)


def test_roofline_takes_the_max_on_gpus():
    cost = CostModel(LLAMA_8B, H100.scaled(step_overhead_s=0, seq_overhead_s=0, layer_overhead_s=0), devices=1)
    w = cost.work([(4096, 0)], 1)
    compute = w.flops / (H100.flops * H100.mfu)
    memory = w.bytes / (H100.mem_bw * H100.mbu)
    assert cost.time(w) == pytest.approx(max(compute, memory))
    assert compute > memory   # a long prefill is compute-bound
    d = cost.work([(1, 1000)] * 8, 8)
    assert d.bytes / (H100.mem_bw * H100.mbu) > d.flops / (H100.flops * H100.mfu)   # decode is memory-bound


@pytest.mark.parametrize("name", sorted(MODELS))
def test_step_time_is_monotonic(name):
    m = model_spec(name)
    devices = 8 if m.weight_bytes_total() > 60e9 else 1
    cost = CostModel(m, H100, devices)
    chunks = [cost.step_time([(n, 0)], 1) for n in (1, 64, 512, 4096)]
    assert chunks == sorted(chunks) and len(set(chunks)) == 4
    contexts = [cost.step_time([(1, c)], 1) for c in (0, 1000, 100000)]
    assert contexts == sorted(contexts) and contexts[0] < contexts[-1]
    batches = [cost.step_time([(1, 1000)] * b, b) for b in (1, 8, 64)]
    assert batches == sorted(batches)
    # a faster memory makes decode faster, never slower
    assert CostModel(m, H200, devices).step_time([(1, 1000)] * 8, 8) <= cost.step_time([(1, 1000)] * 8, 8)


def test_moe_decode_reads_more_experts_as_the_batch_grows():
    cost = CostModel(KIMI_K25, H100, 8)
    one, many = cost.work([(1, 100)], 1), cost.work([(1, 100)] * 64, 64)
    expert = KIMI_K25.expert_params() * 0.5 * KIMI_K25.moe_layers
    assert one.bytes - 100 * KIMI_K25.kv_bytes_per_token() > 8 * expert * 0.99   # top-8 experts per layer
    assert many.bytes > 30 * one.bytes / 10


def test_capacity_and_handoff():
    cost = CostModel(KIMI_K25, H200, 8)
    free = 8 * 141e9 * 0.9 - KIMI_K25.weight_bytes_total()
    assert cost.kv_capacity_tokens() == int(free / KIMI_K25.kv_bytes_per_token())
    assert cost.handoff_time(0) == 0
    assert cost.handoff_time(10000) == pytest.approx(50e-6 + 10000 * 70272 / (8 * 50e9))
    with pytest.raises(ValueError, match="does not fit"):
        CostModel(KIMI_K25, H100, 1).kv_capacity_tokens()
    with pytest.raises(ValueError):
        accelerator("tpu")
