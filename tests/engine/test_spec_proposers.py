"""Each proposer of tandem/spec in the engine: greedy output token for token the same as without
speculation, drafts accepted where the text repeats, suffix drafts from the tenant's earlier
outputs, and the draft model and suffix decoding on a decode worker after the handoff."""

from __future__ import annotations

import dataclasses

import pytest

from tandem.config import SpeculativeConfig
from tandem.engine.engine import Engine
from tandem.spec.factory import make_proposer
from tandem.spec.target import SpecTarget
from tandem.types import EngineRequest, RequestContext, SamplingParams
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import check_decode_after_handoff, prompts, request, run, tokens


def _repetitive(n, seed):
    return [chunk * 3 + chunk[:2] for chunk in prompts(n, seed=seed, min_len=6, max_len=14)]


def _with(engine, method, **cfg):
    spec = SpeculativeConfig(method, **cfg)
    engine.proposer = make_proposer(spec, SpecTarget.of_engine(engine))
    return engine


@pytest.mark.parametrize("method,cfg", [
    ("ngram", dict(prompt_lookup_min=1)),
    ("suffix", {}),
    ("draft_model", dict(model="SELF")),
    ("suffix", dict(model="SELF")),      # suffix decoding with a draft model behind it
])
def test_greedy_output_is_identical(llama_dir, make_engine, method, cfg):
    batch = _repetitive(5, seed=90) + prompts(3, seed=91)
    ref = run(make_engine(llama_dir), reqs := [request(p, max_tokens=24) for p in batch])
    cfg = {k: (str(llama_dir) if v == "SELF" else v) for k, v in cfg.items()}
    spec = _with(make_engine(llama_dir, max_num_batched_tokens=256), method,
                 num_speculative_tokens=4, **cfg)
    res = run(spec, again := [request(p, max_tokens=24) for p in batch])
    assert [tokens(res[a.request_id]) for a in again] == [tokens(ref[r.request_id]) for r in reqs]
    s = spec.stats()
    assert 0 < s.spec_num_accepted_tokens <= s.spec_num_draft_tokens


def _tenant_request(rid, prompt, tenant):
    return EngineRequest(rid, list(prompt), SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True),
                         context=RequestContext(tenant=tenant))


def test_suffix_drafts_from_the_same_tenants_earlier_outputs(llama_dir, make_engine):
    prompt = prompts(1, seed=92, min_len=20, max_len=20)[0]
    spec = _with(make_engine(llama_dir), "suffix", num_speculative_tokens=4)
    first = run(spec, [_tenant_request("a", prompt, "t1")])["a"]

    def accepted_for(rid, tenant):
        before = spec.stats().spec_num_accepted_tokens
        out = run(spec, [_tenant_request(rid, prompt, tenant)])[rid]
        assert tokens(out) == tokens(first)
        return spec.stats().spec_num_accepted_tokens - before

    same, other = accepted_for("b", "t1"), accepted_for("c", "t2")
    assert same >= 20 and same > other


@pytest.mark.parametrize("method", ["draft_model", "suffix"])
def test_proposer_on_a_decode_worker_after_the_handoff(llama_dir, make_engine, method):
    """The decode worker computed none of the prompt (its KV came over the handoff): the
    proposer still drafts from the request's tokens, output stays the same, after a migration
    too, and nothing is left held."""
    prompt = _repetitive(1, seed=93)[0]
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=20)])[r.request_id])
    prefill = Engine.from_config(dataclasses.replace(engine_config(llama_dir, role="prefill"), kv_transport="tcp"))
    decode = Engine.from_config(dataclasses.replace(engine_config(llama_dir, role="decode"), kv_transport="tcp"))
    _with(decode, method, num_speculative_tokens=3, **({"model": str(llama_dir)} if method == "draft_model" else {}))
    try:
        check_decode_after_handoff(prefill, decode, prompt, ref)
        assert decode.stats().spec_num_accepted_tokens > 0
        assert_all_blocks_free(decode)
        if method == "draft_model":
            assert decode.proposer.method.cache.num_held == 0
    finally:
        prefill.shutdown()
        decode.shutdown()
