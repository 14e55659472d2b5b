"""Disaggregated turns through the store: the decode worker writes the blocks of what it generated,
so the next turn, prefilled on another prefill worker, hits the whole previous conversation."""

from __future__ import annotations

from tandem.config import KVStoreConfig
from tandem.types import EngineRequest
from tests.conftest import assert_all_blocks_free
from tests.engine.helpers import prompts, request, run, tokens
from tests.kvstore.helpers import settle, tiered_engine, tiers_of, wait_store


def test_next_turn_on_another_prefill_worker_hits_the_previous_answer(master, llama_dir, make_engine):
    cfg = KVStoreConfig(store_url=master.url, store_segment_bytes=32 << 20, retry_s=0.3)
    p1 = tiered_engine(llama_dir, cfg, role="prefill")
    d = tiered_engine(llama_dir, cfg, role="decode")
    p2 = tiered_engine(llama_dir, cfg, role="prefill")
    engines = (p1, d, p2)
    try:
        for e in engines:
            wait_store(e)
        turn1 = prompts(1, seed=90, min_len=26, max_len=26)[0]
        first = request(turn1, max_tokens=8, prefill_only=True)
        pre = run(p1, [first])[first.request_id][-1]
        dec = EngineRequest("d1", list(turn1), first.sampling, kv_handle=pre.kv_handle,
                            resume_output_ids=list(pre.new_token_ids))
        answer = pre.new_token_ids + tokens(run(d, [dec])[dec.request_id])
        ref1 = tokens(run(make_engine(llama_dir), [r := request(turn1, max_tokens=8)])[r.request_id])
        assert answer == ref1
        for e in engines:
            settle(e)
        # turn 2 resends the conversation plus a tool result, prefilled on the other prefill worker
        turn2 = turn1 + answer + prompts(1, seed=91, min_len=7, max_len=7)[0]
        second = request(turn2, max_tokens=8, prefill_only=True)
        pre2 = run(p2, [second])[second.request_id][-1]
        conversation_blocks = (len(turn1) + len(answer) - 1) // 4   # the answer's last token has no KV
        assert pre2.num_cached_tokens == conversation_blocks * 4
        assert tiers_of(p2).stack["store"].counters.hits == conversation_blocks * 4
        ref2 = tokens(run(make_engine(llama_dir), [r := request(turn2, max_tokens=8)])[r.request_id])
        assert pre2.new_token_ids == ref2[:1]
        dec2 = EngineRequest("d2", list(turn2), second.sampling, kv_handle=pre2.kv_handle,
                             resume_output_ids=list(pre2.new_token_ids))
        assert pre2.new_token_ids + tokens(run(d, [dec2])[dec2.request_id]) == ref2
        for e in engines:
            settle(e)
            assert_all_blocks_free(e)
    finally:
        for e in engines:
            e.shutdown()
