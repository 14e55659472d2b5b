"""The draft-model proposer: it refuses a draft with another tokenizer, drafts what the target
would say when it is the target, keeps greedy output identical whatever the draft, keeps its KV
in step with the request across accepted and rejected drafts, and frees every block."""

from __future__ import annotations

import pytest

from tandem.config import SpeculativeConfig
from tandem.errors import ModelLoadError
from tandem.kv.block_hash import cache_keys
from tandem.spec.factory import make_proposer
from tandem.spec.target import SpecTarget
from tandem.testing.tiny_model import write_test_model
from tandem.types import RequestContext
from tests.engine.helpers import prompts, request, run, tokens


@pytest.fixture(scope="module")
def small_draft_dir(tmp_path_factory):
    """Another random model with the same (seed-trained) tokenizer as llama_dir: 1 layer."""
    return write_test_model(tmp_path_factory.mktemp("draft"), "LlamaForCausalLM", hidden_size=32,
                            num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64, seed=9)


def _draft_engine(make_engine, model_dir, draft_dir, k=4, **engine_kw):
    engine = make_engine(model_dir, **engine_kw)
    cfg = SpeculativeConfig("draft_model", model=str(draft_dir), num_speculative_tokens=k)
    engine.proposer = make_proposer(cfg, SpecTarget.of_engine(engine))
    return engine


def _draft(engine):
    return engine.proposer.method


def test_a_draft_with_another_tokenizer_is_refused(llama_dir, make_engine, tmp_path):
    other = write_test_model(tmp_path / "other", "LlamaForCausalLM", vocab_size=384, seed=3)
    engine = make_engine(llama_dir)
    cfg = SpeculativeConfig("draft_model", model=str(other))
    with pytest.raises(ModelLoadError, match="does not share the target's tokenizer"):
        make_proposer(cfg, SpecTarget.of_engine(engine))
    with pytest.raises(ValueError, match="needs the target"):
        make_proposer(cfg)


def test_the_target_as_its_own_draft_is_always_accepted(llama_dir, make_engine):
    batch = prompts(4, seed=80, min_len=5, max_len=30)
    plain = make_engine(llama_dir)
    ref = run(plain, reqs := [request(p, max_tokens=20) for p in batch])
    spec = _draft_engine(make_engine, llama_dir, llama_dir, k=4, max_num_batched_tokens=256)
    res = run(spec, again := [request(p, max_tokens=20) for p in batch])
    assert [tokens(res[a.request_id]) for a in again] == [tokens(ref[r.request_id]) for r in reqs]
    s = spec.stats()
    # the same model drafts the target's greedy tokens: all but float noise accepted
    assert s.spec_num_draft_tokens > 40
    assert s.spec_num_accepted_tokens >= 0.9 * s.spec_num_draft_tokens
    assert _draft(spec).cache.num_held == 0 and not _draft(spec).cache.seqs


def test_greedy_output_identical_with_a_poor_draft_and_blocks_freed(llama_dir, small_draft_dir, make_engine):
    batch = prompts(6, seed=81, min_len=3, max_len=40)
    ref = run(make_engine(llama_dir), reqs := [request(p, max_tokens=24) for p in batch])
    spec = _draft_engine(make_engine, llama_dir, small_draft_dir, k=3, max_num_batched_tokens=256)
    draft = _draft(spec)
    res = run(spec, again := [request(p, max_tokens=24) for p in batch])
    assert [tokens(res[a.request_id]) for a in again] == [tokens(ref[r.request_id]) for r in reqs]
    assert spec.stats().spec_num_draft_tokens > 0
    assert draft.cache.num_held == 0 and draft.cache.pool.num_free == draft.cache.pool.num_blocks
    # aborted mid-stream: its blocks come back too
    spec.add_request(r := request(batch[0], max_tokens=50))
    for _ in range(6):
        spec.step()
    assert draft.cache.num_held > 0
    spec.abort(r.request_id)
    assert draft.cache.num_held == 0


def test_the_draft_kv_follows_accepted_and_rejected_tokens(llama_dir, make_engine):
    """The draft's positions after each call: the request's tokens, then what it fed itself."""
    spec = _draft_engine(make_engine, llama_dir, llama_dir, k=3)
    draft = _draft(spec)

    class Req:
        all_token_ids = [5, 6, 7, 8, 9]
        cache_keys = ()

    req = Req()
    first = draft.propose([req], [3])[0]
    seq = draft.cache.seqs[req]
    assert len(first) == 3 and seq.computed == 5 + 2 and seq.fed == first[:2]
    # the target accepted the first draft token and said 4 instead of the second
    req.all_token_ids = req.all_token_ids + [first[0], 4]
    assert seq.valid(req.all_token_ids) == 6
    second = draft.propose([req], [2])[0]
    assert len(second) == 2 and seq.computed == 7 + 1 and seq.base == 7
    # the same continuation computed from scratch gives the same draft
    fresh = _draft_engine(make_engine, llama_dir, llama_dir, k=3)

    class Again:
        all_token_ids = list(req.all_token_ids)
        cache_keys = ()

    assert _draft(fresh).propose([Again()], [2])[0] == second
    draft.finished(req)
    _draft(fresh).finished(Again)
    assert draft.cache.num_held == 0


def test_a_long_context_is_caught_up_over_several_calls(llama_dir, make_engine):
    spec = _draft_engine(make_engine, llama_dir, llama_dir, k=2)
    draft = _draft(spec)
    draft.cfg = type(draft.cfg)(catchup_tokens_per_step=16)

    class Req:
        all_token_ids = prompts(1, seed=82, min_len=40, max_len=40)[0]
        cache_keys = ()

    req = Req()
    calls = [draft.propose([req], [2])[0] for _ in range(3)]
    assert calls[:2] == [[], []] and len(calls[2]) == 2   # 16 + 16 + 8 tokens
    draft.finished(req)


def test_a_shared_prefix_is_caught_up_once_per_tenant(llama_dir, make_engine):
    """A second request with the same leading blocks takes them from the draft's prefix cache and
    computes only its own tail; another tenant's (its API key's tenant: the KV partition of
    tandem/kv/block_hash.py, as the target's) computes everything; the drafts are
    those of a draft that computed everything."""
    spec = _draft_engine(make_engine, llama_dir, llama_dir, k=2)
    draft = _draft(spec)
    bs = draft.cache.block_size
    prefix = prompts(1, seed=84, min_len=6 * bs, max_len=6 * bs)[0]
    computed: list[int] = []
    forward = draft._forward
    draft._forward = lambda items, sampled: computed.append(sum(len(new) for _, new, _ in items)) or \
        forward(items, sampled)

    class Req:
        def __init__(self, tokens, tenant="key-0"):
            self.all_token_ids = list(tokens)
            self.cache_keys = cache_keys(RequestContext(tenant=tenant))

    a, b, c = Req(prefix + [5, 6, 7]), Req(prefix + [9, 10]), Req(prefix + [9, 10], tenant="key-1")
    draft.propose([a], [2])
    assert computed[0] == len(a.all_token_ids)
    computed.clear()
    got_b = draft.propose([b], [2])[0]
    assert computed[0] == len(b.all_token_ids) - 6 * bs      # its own tail only
    computed.clear()
    got_c = draft.propose([c], [2])[0]
    assert computed[0] == len(c.all_token_ids)               # another tenant shares nothing
    fresh = _draft(_draft_engine(make_engine, llama_dir, llama_dir, k=2))
    assert got_b == got_c == fresh.propose([Req(b.all_token_ids)], [2])[0]
    for r in (a, b, c):
        draft.finished(r)
    assert draft.cache.num_held == 0


def test_a_declared_shared_prefix_is_caught_up_once_for_every_tenant(llama_dir, make_engine):
    """--shared-prefixes: the draft's blocks inside the declared prefix serve another tenant, which
    computes only the rest (its own question is never taken from the first tenant's blocks)."""
    spec = _draft_engine(make_engine, llama_dir, llama_dir, k=2)
    draft = _draft(spec)
    bs = draft.cache.block_size
    prefix = prompts(1, seed=85, min_len=4 * bs, max_len=4 * bs)[0]
    question = prompts(1, seed=86, min_len=2 * bs, max_len=2 * bs)[0]
    computed: list[int] = []
    forward = draft._forward
    draft._forward = lambda items, sampled: computed.append(sum(len(new) for _, new, _ in items)) or \
        forward(items, sampled)

    class Req:
        def __init__(self, tenant):
            self.all_token_ids = prefix + question
            self.cache_keys = cache_keys(RequestContext(tenant=tenant, shared_prefix_tokens=len(prefix)))

    a, b = Req("key-0"), Req("key-1")
    draft.propose([a], [2])
    assert computed[0] == len(a.all_token_ids)
    computed.clear()
    got_b = draft.propose([b], [2])[0]
    assert computed[0] == len(b.all_token_ids) - len(prefix)   # the declaration's blocks, no more
    fresh = _draft(_draft_engine(make_engine, llama_dir, llama_dir, k=2))
    assert got_b == fresh.propose([Req("key-1")], [2])[0]
    for r in (a, b):
        draft.finished(r)
    assert draft.cache.num_held == 0
