"""scripts/gpu-bench.sh --smoke end to end on TANDEM_TEST_DEVICE (tiny shapes; on the CPU the Triton
variants run interpreted and the CUDA-graph variant is reported as not measured, with why), the
bounds against hand-computed numbers, and the CUDA-graph branch of a decode cell with a stand-in
graph (a capture needs a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu import tandem_steps
from benchmarks.gpu.bounds import ModelCost, decode_bound, prefill_bound
from benchmarks.gpu.limits import Limits
from benchmarks.gpu.shapes import LLAMA3_8B, QWEN3_30B_A3B, TINY_MODELS
from tandem.models.arch import ModelArch
from tests.conftest import TEST_DEVICE
from tests.runner.test_cuda_graphs import EagerGraphs

REPO = Path(__file__).resolve().parents[2]
LIMITS = Limits(copy_bytes_per_s=1e12, matmul_flops=1e15, copy_bytes=0, matmul_n=0)


def test_smoke_run_writes_every_cell(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(REPO / "scripts/gpu-bench.sh"), str(tmp_path / "out"), "--smoke",
                          "--device", TEST_DEVICE], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / "out/gpu-bench.json").read_text())
    assert report["smoke"] and report["limits"]["copy_bytes_per_s"] > 0 and report["limits"]["matmul_flops"] > 0
    cells = report["cells"]
    for model in ("llama3-8b", "qwen3-30b-a3b", "deepseek-v3-layer"):
        mine = {(c["step"], c["variant"], c["batch"], c["tokens"]): c for c in cells if c["model"] == model}
        for variant in ("eager", "triton"):
            for key in [("decode", variant, 1, 40), ("decode", variant, 3, 40), ("prefill", variant, 1, 24)]:
                assert mine[key]["seconds"] > 0 and mine[key]["bound_s"] > 0 and mine[key]["skipped"] is None, key
        graphs = mine["decode", "triton+graphs", 3, 40]
        assert graphs["seconds"] > 0 if TEST_DEVICE == "cuda" else "CUDA device" in graphs["skipped"]
        assert mine["hf-decode", "transformers", 1, 16]["seconds"] >= 0
    md = (tmp_path / "out/gpu-bench.md").read_text()
    assert "## deepseek-v3-layer" in md and "| decode | triton | 3 | 40 |" in md and "Not measured:" in md
    assert "torch" in (tmp_path / "out/env.txt").read_text()


def test_bounds_of_llama3_8b():
    cost = ModelCost.of(ModelArch.from_config(LLAMA3_8B), torch.bfloat16)
    assert cost.weight_bytes == (8_030_261_248 - 128256 * 4096) * 2 and cost.expert_bytes == 0
    assert cost.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2
    # batch 1 over 1k tokens reads its weights and KV: memory-bound
    assert decode_bound(cost, LIMITS, 1, 1024) == pytest.approx((cost.weight_bytes + 1024 * 131072) / 1e12)
    # an 8k chunk computes 2 FLOPs per weight per token, plus causal attention: compute-bound
    flops = 8192 * 2 * (8_030_261_248 - 128256 * 4096) + 8192 * 8193 / 2 * 32 * 4 * 32 * 128
    assert prefill_bound(cost, LIMITS, 8192) == pytest.approx(flops / 1e15)


def test_a_moe_step_reads_only_the_experts_it_touches():
    cost = ModelCost.of(ModelArch.from_config(QWEN3_30B_A3B), torch.bfloat16)
    assert cost.expert_bytes == 48 * 128 * 3 * 2048 * 768 * 2 and cost.expert_fraction == 8 / 128
    assert cost.touched_expert_bytes(1) == pytest.approx(cost.expert_bytes / 16)
    assert cost.touched_expert_bytes(256) == pytest.approx(cost.expert_bytes, rel=1e-6)


def test_a_decode_cell_through_the_graph_branch(monkeypatch):
    monkeypatch.setattr(tandem_steps, "DecodeGraphs", EagerGraphs)
    model, arch = tandem_steps.build_model(TINY_MODELS["llama3-8b"], torch.float32, torch.device("cpu"))
    kv = tandem_steps.kv_cache(arch, torch.float32, torch.device("cpu"), 16)
    assert tandem_steps.decode_seconds(model, kv, 2, 20, True, reps=1, warmup=0) > 0
    assert tandem_steps.decode_seconds(model, kv, 8, 40, True, reps=1, warmup=0) is None   # needs 24 blocks
