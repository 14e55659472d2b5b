"""CUDA graphs of decode steps on a GPU (skipped without one; CI has none): an engine with
--attention triton, --moe-kernel triton and captured decode sizes gives the eager engine's greedy
tokens, dense, MoE and MLA, with steps padded to a captured size (3 sequences) and steps past the
largest size (5) run eagerly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tandem.engine.engine import Engine
from tandem.testing.tiny_model import write_test_model
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_replayed_decode_steps_equal_eager_ones(arch, dtype, tmp_path):
    path = write_test_model(tmp_path, arch, seed=9)
    ps = prompts(8, seed=3, min_len=5, max_len=60)
    outs = []
    for model in ({"attention": "triton", "moe_kernel": "triton"},
                  {"attention": "triton", "moe_kernel": "triton", "cuda_graph_sizes": (1, 2, 4)}):
        cfg = engine_config(path, device="cuda", dtype=dtype, max_num_batched_tokens=64)
        engine = Engine.from_config(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model)))
        assert (engine.runner.graphs is not None) == ("cuda_graph_sizes" in model)
        reqs = [request(p, max_tokens=8) for p in ps]
        out = run(engine, reqs[:3])            # 3 sequences replay size 4
        out.update(run(engine, reqs[3:]))      # 5: past the largest size, eager until some finish
        outs.append([tokens(out[r.request_id]) for r in reqs])
        assert_all_blocks_free(engine)
        engine.shutdown()
    assert outs[0] == outs[1]
