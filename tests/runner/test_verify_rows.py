"""Verify rows are single-token decode rows in bfloat16: where a multi-token prefill chunk rounds
differently from decoding, greedy output with proposals (right and wrong) is token for token the
output without them."""

from __future__ import annotations

from tests.engine.helpers import prompts, request, run, tokens
from tests.engine.test_multi_token_step import ScriptedProposer


def test_verify_rows_are_decode_rows_in_bf16(make_engine, llama_dir):
    engine = make_engine(llama_dir, dtype="bfloat16")
    assert engine.runner.verify_as_decode_rows
    assert not make_engine(llama_dir).runner.verify_as_decode_rows   # float32: one chunk, faster
    engine.add_request(r := request(prompts(1, seed=2)[0], max_tokens=3))
    engine.step()   # prefill: one chunk
    req = engine.requests[r.request_id]
    req.proposed_token_ids = [5, 6, 7]
    out = engine.scheduler.schedule()
    inputs = engine.runner.prepare(out.seqs, [engine.kv.block_ids(s.request.request_id) for s in out.seqs])
    assert [(s.num_computed, s.num_new) for s in inputs.slices] == [(req.num_tokens - 1 + j, 1) for j in range(4)]
    assert not inputs.batch.prefills
    engine.runner.execute(inputs)
    engine.abort(r.request_id)


def test_bf16_greedy_identical_with_proposals(make_engine, llama_dir):
    batch = prompts(8, seed=21, min_len=5, max_len=60)
    n = 40
    plain = make_engine(llama_dir, dtype="bfloat16")
    ref = run(plain, reqs := [request(p, max_tokens=n) for p in batch])
    reference = {tuple(p): tokens(ref[r.request_id]) for p, r in zip(batch, reqs)}
    for wrong_every in (3, 7):
        spec = make_engine(llama_dir, dtype="bfloat16", max_num_batched_tokens=256)
        spec.proposer = ScriptedProposer(reference, k=5, wrong_every=wrong_every,
                                         vocab=spec.loaded.arch.vocab_size)
        res = run(spec, again := [request(p, max_tokens=n) for p in batch])
        assert [tokens(res[a.request_id]) for a in again] == [reference[tuple(p)] for p in batch]
        assert spec.proposer.proposed > 100
