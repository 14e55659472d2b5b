"""A model loaded with --attention triton and --moe-kernel triton decodes the same greedy tokens as
with the default kernels (chunked prefill, prefix-cache hits, several decode buckets): the kernels
selected at load time and run through the whole engine, dense, MoE and MLA."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install '.[test]')")

from tandem.engine.engine import Engine  # noqa: E402
from tandem.kernels.triton.fused_moe import TritonFusedMoE  # noqa: E402
from tandem.kernels.triton.paged_attention import TritonPagedDecode  # noqa: E402
from tandem.layers.moe import SparseMoE  # noqa: E402
from tandem.testing.tiny_model import write_test_model  # noqa: E402
from tests.conftest import assert_all_blocks_free, engine_config  # noqa: E402
from tests.engine.helpers import prompts, request, run, tokens  # noqa: E402


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"])
def test_triton_kernels_decode_as_the_default_ones(arch, tmp_path):
    path = write_test_model(tmp_path, arch, seed=4, num_layers=2)
    ps = prompts(4, seed=2, min_len=5, max_len=30)
    ps.append(ps[0][:12] + ps[1][:3])   # a prefix-cache hit: prefill over a cached context
    outs = []
    for kernels in ({}, {"attention": "triton", "moe_kernel": "triton"}):
        cfg = engine_config(path, max_num_batched_tokens=16)
        engine = Engine.from_config(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **kernels)))
        if kernels:
            ws = engine.runner.model.workspace
            assert isinstance(ws.decode_kernel, TritonPagedDecode) and ws.mla_kernel is not None
            moes = [m for m in engine.runner.model.modules() if isinstance(m, SparseMoE)]
            assert all(isinstance(m.kernel, TritonFusedMoE) for m in moes)
        reqs = [request(p, max_tokens=6) for p in ps]
        out = run(engine, reqs[:-1])
        out.update(run(engine, reqs[-1:]))
        outs.append([tokens(out[r.request_id]) for r in reqs])
        assert_all_blocks_free(engine)
        engine.shutdown()
    assert outs[0] == outs[1]
