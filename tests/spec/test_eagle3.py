"""The EAGLE-3 proposer: a head loads only against the target it was trained for, greedy output
stays identical with a random head, the head's state follows accepted and rejected drafts, and
every block and captured state is dropped when requests leave."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tandem.config import SpeculativeConfig
from tandem.errors import ModelLoadError
from tandem.kv.block_hash import cache_keys
from tandem.spec.eagle3_head import Eagle3Head, init_head
from tandem.spec.eagle3_kv import HeadKV
from tandem.spec.eagle3_loader import config_for_target, load_head, save_head, target_fingerprint
from tandem.spec.factory import make_proposer
from tandem.spec.target import SpecTarget
from tandem.testing.tiny_model import write_test_model
from tandem.types import RequestContext
from tests.engine.helpers import prompts, request, run, tokens


def _head_dir(engine, path, seed=0, aux_layers=None, scale=1.0):
    model = engine.loaded.model
    head = init_head(Eagle3Head(config_for_target(model, aux_layers)), seed)
    with torch.no_grad():   # scale > 1: a head whose drafts depend on its context
        for p in head.parameters():
            if p.dim() >= 2:
                p.mul_(scale)
    save_head(head, str(path), dtype=torch.float32)
    return path


def _eagle_engine(make_engine, model_dir, head_dir, k=4, **kw):
    engine = make_engine(model_dir, **kw)
    cfg = SpeculativeConfig("eagle3", model=str(head_dir), num_speculative_tokens=k, adaptive=False)
    engine.proposer = make_proposer(cfg, SpecTarget.of_engine(engine))
    return engine


def test_head_shape_and_round_trip(llama_dir, make_engine, tmp_path):
    engine = make_engine(llama_dir)
    arch = engine.loaded.arch
    d = _head_dir(engine, tmp_path / "head", seed=3)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3Head"]
    assert cfg["hidden_size"] == arch.hidden_size and len(cfg["aux_layers"]) == min(3, arch.num_layers)
    assert cfg["target"]["fingerprint"] == target_fingerprint(engine.loaded.model)
    head = load_head(str(d), engine.loaded.model, torch.float32, torch.device("cpu"))
    assert head.fc.weight.shape == (arch.hidden_size, arch.hidden_size * len(cfg["aux_layers"]))
    assert head.q_proj.weight.shape[1] == 2 * arch.hidden_size
    # the head stores only its own weights (the target's embedding and LM head are shared)
    assert not any(k.startswith(("embed_tokens", "lm_head", "model.")) for k in head.state_dict())


def test_a_head_for_another_target_is_refused(llama_dir, make_engine, tmp_path):
    engine = make_engine(llama_dir)
    d = _head_dir(engine, tmp_path / "head")
    other_dir = write_test_model(tmp_path / "other", "LlamaForCausalLM", seed=7)   # same shape, other weights
    other = make_engine(other_dir)
    cfg = SpeculativeConfig("eagle3", model=str(d))
    with pytest.raises(ModelLoadError, match="other target weights.*retrain"):
        make_proposer(cfg, SpecTarget.of_engine(other))
    wider = write_test_model(tmp_path / "wider", "LlamaForCausalLM", hidden_size=96, seed=1)
    with pytest.raises(ModelLoadError, match="hidden size"):
        make_proposer(cfg, SpecTarget.of_engine(make_engine(wider)))
    with pytest.raises(ValueError, match="needs the target"):
        make_proposer(cfg)
    assert engine.loaded.model.aux_tap is None and other.loaded.model.aux_tap is None


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_greedy_output_identical_with_a_random_head(llama_dir, make_engine, tmp_path, prefix_caching):
    batch = prompts(6, seed=90, min_len=3, max_len=40)
    ref = run(make_engine(llama_dir, prefix_caching=prefix_caching),
              reqs := [request(p, max_tokens=24) for p in batch])
    spec = _eagle_engine(make_engine, llama_dir, _head_dir(make_engine(llama_dir), tmp_path / "h"), k=3,
                         max_num_batched_tokens=256, prefix_caching=prefix_caching)
    eagle = spec.proposer.method
    # twice: the second wave reads its prompts from the prefix cache (no target states for them)
    for _ in range(2):
        res = run(spec, again := [request(p, max_tokens=24) for p in batch])
        assert [tokens(res[a.request_id]) for a in again] == [tokens(ref[r.request_id]) for r in reqs]
    assert spec.stats().spec_num_draft_tokens > 50
    assert eagle.cache.num_held == 0 and not eagle.cache.seqs and not eagle.tap.pending
    eagle.close()
    assert spec.loaded.model.aux_tap is None
    eagle.attach()                                   # a kept head captures again
    assert spec.loaded.model.aux_tap is eagle.tap
    eagle.close()


def test_the_head_rows_follow_the_tokens(llama_dir, make_engine, tmp_path):
    """After each step the head holds rows from the target's states for every position but the
    newest token's, and has consumed every state the runner captured."""
    spec = _eagle_engine(make_engine, llama_dir, _head_dir(make_engine(llama_dir), tmp_path / "h"), k=2)
    eagle = spec.proposer.method
    spec.add_request(r := request(prompts(1, seed=5, min_len=12, max_len=13)[0], max_tokens=12))
    for _ in range(4):
        spec.step()
        req = spec.requests[r.request_id]
        seq = eagle.cache.seqs.get(req)
        if seq is not None:
            # true rows cover every position but the newest token's: [origin, n - 1)
            assert seq.origin + seq.rows == req.num_tokens - 1
            assert eagle.tap.pending[req].chunks == []
    spec.abort(r.request_id)
    assert eagle.cache.num_held == 0 and not eagle.cache.seqs


@pytest.mark.parametrize("reuse", [True, False])
def test_prompts_from_the_prefix_cache_reuse_the_heads_rows(llama_dir, make_engine, tmp_path, reuse):
    """The second wave's prompts come from the target's prefix cache (no target states): the
    head's own prefix cache holds their rows, so it drafts exactly as in the first wave."""
    batch = prompts(3, seed=31, min_len=30, max_len=50)
    spec = _eagle_engine(make_engine, llama_dir, _head_dir(make_engine(llama_dir), tmp_path / "h", scale=20),
                         k=3, max_num_batched_tokens=256)
    eagle = spec.proposer.method
    if not reuse:
        eagle.cache.reuse = lambda *a: 0
    firsts = []
    for wave in range(2):
        drafts_before = []
        orig = eagle.propose

        def spy(requests, limits=None):
            out = orig(requests, limits)
            drafts_before.append(sorted((r.num_tokens, tuple(d)) for r, d in zip(requests, out)))
            return out

        eagle.propose = spy
        run(spec, [request(p, max_tokens=12) for p in batch])
        eagle.propose = orig
        firsts.append(drafts_before)
    # same drafts at the same lengths; without the head's prefix cache its window is cut short
    assert (firsts[0] == firsts[1]) == reuse
    assert (eagle.cache.pool.num_cached > 0) and eagle.cache.num_held == 0


def test_a_decode_worker_after_the_handoff(llama_dir, make_engine, tmp_path):
    """The decode worker holds no target states of the handed-over prompt: the head drafts from
    what it sees from then on, output stays the same (after a migration too) and nothing is
    left held."""
    import dataclasses

    from tandem.engine.engine import Engine
    from tests.conftest import assert_all_blocks_free, engine_config
    from tests.engine.helpers import check_decode_after_handoff

    prompt = prompts(1, seed=94, min_len=30, max_len=30)[0]
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=20)])[r.request_id])
    head = _head_dir(make_engine(llama_dir), tmp_path / "h")
    prefill = Engine.from_config(dataclasses.replace(engine_config(llama_dir, role="prefill"), kv_transport="tcp"))
    decode = Engine.from_config(dataclasses.replace(engine_config(llama_dir, role="decode"), kv_transport="tcp"))
    cfg = SpeculativeConfig("eagle3", model=str(head), num_speculative_tokens=3, adaptive=False)
    decode.proposer = make_proposer(cfg, SpecTarget.of_engine(decode))
    eagle = decode.proposer.method
    try:
        check_decode_after_handoff(prefill, decode, prompt, ref)
        assert decode.stats().spec_num_draft_tokens > 0
        assert_all_blocks_free(decode)
        assert eagle.cache.num_held == 0 and not eagle.cache.seqs and not eagle.tap.pending
    finally:
        eagle.close()
        prefill.shutdown()
        decode.shutdown()


def test_the_heads_prefix_cache_is_keyed_by_the_requests_partition():
    """A published block of head rows serves a later request with the same tokens and KV partition
    (cache salt and tenant, tandem/kv/block_hash.py) only: another tenant's, another salt's or an
    anonymous request computes its own rows."""
    class Req:
        def __init__(self, context):
            self.cache_keys = cache_keys(context)

    kv = HeadKV(num_blocks=16, block_size=4)
    tokens = list(range(100, 113))
    contexts = {"a": RequestContext(tenant="key-0"), "a-salted": RequestContext(tenant="key-0", cache_salt="s"),
                "b": RequestContext(tenant="key-1"), "anonymous": RequestContext(),
                "a-again": RequestContext(tenant="key-0", session_id="other")}
    first = Req(contexts["a"])
    seq = kv.seq(first)
    assert kv.reserve(seq, len(tokens) - 1)
    seq.rows = len(tokens) - 1     # rows from the target's states for every position but the last
    kv.publish(seq, tokens)
    kv.free(first)
    hits = {name: kv.reuse(kv.seq(Req(c)), tokens, 0, len(tokens) - 1) for name, c in contexts.items()}
    assert hits == {"a": 12, "a-salted": 0, "b": 0, "anonymous": 0, "a-again": 12}


def test_the_heads_blocks_inside_a_declared_shared_prefix_serve_every_tenant():
    """--shared-prefixes: head rows of blocks whose tokens, one past the block included, all lie
    in the shared tokens are keyed without the tenant; a block holding a tenant's own token is not."""
    class Req:
        def __init__(self, tenant, shared):
            self.cache_keys = cache_keys(RequestContext(tenant=tenant, shared_prefix_tokens=shared))

    kv = HeadKV(num_blocks=16, block_size=4)
    tokens = list(range(100, 113))

    def publish(req):
        seq = kv.seq(req)
        assert kv.reserve(seq, len(tokens) - 1)
        seq.rows = len(tokens) - 1
        kv.publish(seq, tokens)
        kv.free(req)

    publish(Req("key-0", 13))    # every row's tokens declared: 3 shared blocks
    assert kv.reuse(kv.seq(b := Req("key-1", 13)), tokens, 0, 12) == 12
    kv.free(b)
    # 12 shared tokens: block 2's rows depend on token 12, the tenant's own, so B cannot reuse
    # the run up to its position (the head reuses whole runs only)
    assert kv.reuse(kv.seq(c := Req("key-1", 12)), tokens, 0, 12) == 0
    kv.free(c)


def test_a_request_far_behind_catches_up_only_the_window(llama_dir, make_engine, tmp_path):
    """With catchup_window W, a 40-token prompt gives the head only its last W rows at most (its
    window restarts there, on a block boundary); drafting goes on from them, and greedy output is
    unchanged."""
    prompt = prompts(1, seed=8, min_len=40, max_len=41)[0]
    ref = run(make_engine(llama_dir, prefix_caching=False), [r0 := request(prompt, max_tokens=10)])
    spec = _eagle_engine(make_engine, llama_dir, _head_dir(make_engine(llama_dir), tmp_path / "h"), k=2,
                         prefix_caching=False)
    eagle = spec.proposer.method
    eagle.reconfigure(dataclasses.replace(eagle.cfg, catchup_window=8))
    assert eagle.tap.max_rows == 8
    spec.add_request(r := request(prompt, max_tokens=10))
    deltas = spec.step()     # the prompt and its first token; then the head catches up and drafts
    req = spec.requests[r.request_id]
    seq = eagle.cache.seqs[req]
    # the window starts on the first block boundary at or after n - 1 - 8 (block size 4)
    assert (seq.origin, seq.origin + seq.rows) == (-(-(req.num_tokens - 1 - 8) // 4) * 4, req.num_tokens - 1)
    for _ in range(50):
        if not spec.requests:
            break
        deltas += spec.step()
    assert tokens(deltas) == tokens(ref[r0.request_id])
    assert spec.stats().spec_num_draft_tokens > 0 and eagle.cache.num_held == 0


def test_a_window_anywhere_in_the_prompt_is_published_and_reused():
    """Rows computed in a window starting on a block boundary are cached under their absolute
    blocks; a later request adopts the run that ends where its own target states begin."""
    class Req:
        cache_keys = ()

    kv = HeadKV(num_blocks=16, block_size=4)
    tokens = list(range(200, 230))                # 30 tokens
    first = Req()
    seq = kv.seq(first)
    kv.restart(seq, 12)                           # a window from position 12 (block 3)
    assert kv.reserve(seq, 29 - 12)
    seq.rows = 29 - 12                            # rows for positions [12, 29)
    kv.publish(seq, tokens)
    assert seq.published == 4                     # blocks 3..6 (positions 12-27)
    kv.free(first)
    again = kv.seq(Req())
    assert kv.reuse(again, tokens, 14, 24) == 12  # from block 3 (lo 14 is in it) up to position 24
    assert (again.origin, again.rows) == (12, 12)
    kv.free(Req())
    assert kv.reuse(kv.seq(Req()), tokens, 0, 10) == 0      # blocks 0-1 were never computed
    late = Req()
    kv.restart(s2 := kv.seq(late), 13)            # off a block boundary: nothing published
    assert kv.reserve(s2, 16)
    s2.rows = 16
    kv.publish(s2, tokens)
    assert s2.published == 0


def test_a_long_prompt_from_the_targets_prefix_cache_finds_its_window(llama_dir, make_engine, tmp_path):
    """With the target's prefix cache on, a prompt whose start the target has cached gives the head
    no states for it; the head adopts the rows a previous request computed in its window, and its
    window ends where the new states begin."""
    # 46 tokens: the target caches blocks up to 44 for the second prompt; head row 43 reads token 44,
    # shared too (a prompt diverging right on a block boundary would leave the head's last block unusable)
    base = prompts(1, seed=9, min_len=46, max_len=46)[0]
    spec = _eagle_engine(make_engine, llama_dir, _head_dir(make_engine(llama_dir), tmp_path / "h"), k=2)
    eagle = spec.proposer.method
    eagle.reconfigure(dataclasses.replace(eagle.cfg, catchup_window=8))
    run(spec, [request(base, max_tokens=6)])
    reused = []
    orig = eagle.cache.reuse
    eagle.cache.reuse = lambda *a: reused.append(orig(*a)) or reused[-1]
    spec.add_request(r := request(base + [7, 8, 9, 10], max_tokens=6))
    spec.step()
    req = spec.requests[r.request_id]
    seq = eagle.cache.seqs[req]
    assert reused and reused[0] > 0 and seq.origin > 0 and seq.origin % 4 == 0
    assert seq.origin + seq.rows == req.num_tokens - 1
    assert seq.origin <= req.num_tokens - 1 - 8      # the window reaches back as far as asked
    for _ in range(50):
        if not spec.requests:
            break
        spec.step()
    assert eagle.cache.num_held == 0
