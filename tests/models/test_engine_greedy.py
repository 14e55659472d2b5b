"""The engine's greedy output on the MoE and MLA families equals transformers' token for token,
with batching, chunked prefill and prefix-cache hits (MLA: through the latent cache)."""

from __future__ import annotations

import pytest

from tandem.testing.tiny_model import write_test_model
from tests.engine.helpers import hf_greedy, prompts, request, run, tokens

ARCHS = ["MixtralForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"]


@pytest.fixture(scope="module", params=ARCHS)
def model_dir(request, tmp_path_factory):
    return write_test_model(tmp_path_factory.mktemp(request.param), request.param, seed=11)


def test_batched_chunked_greedy_equals_transformers(model_dir, make_engine):
    engine = make_engine(model_dir, max_num_batched_tokens=24)
    ps = prompts(6, seed=8, min_len=5, max_len=40)
    shared = ps[0][:20]
    ps.append(shared + ps[1][:7])           # a prefix-cache hit on the first prompt's blocks
    reqs = [request(p, max_tokens=8) for p in ps]
    out = run(engine, reqs[:-1])
    out.update(run(engine, reqs[-1:]))
    for r, p in zip(reqs, ps):
        assert tokens(out[r.request_id]) == hf_greedy(model_dir, p, 8), r.request_id


def test_mla_layout_caches_the_latent(tmp_path, make_engine):
    path = write_test_model(tmp_path, "DeepseekV3ForCausalLM")
    engine = make_engine(path)
    layout = engine.layout
    assert (layout.kind, layout.num_kv_heads, layout.head_dim) == ("mla", 1, 32 + 8)
    assert engine.runner.kv_cache.shape[1:] == (2, 1, 4, 1, 40)
