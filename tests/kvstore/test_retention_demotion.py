"""Retained blocks taken under pressure are demoted to the host tier, not dropped: a session's
turn retained with a hint, its copy gone from host memory (as if the tier had evicted it), a long
one-shot takes four of its blocks; they are copied to host memory before being overwritten, and
the next turn finds its whole context (device prefix + host), with unchanged greedy output."""

from __future__ import annotations

import torch

from tandem.config import KVStoreConfig
from tandem.types import AgentTurn, RequestContext
from tests.conftest import assert_all_blocks_free
from tests.engine.helpers import prompts, request, run, tokens
from tests.kvstore.helpers import settle, tiered_engine, tiers_of


def _turn(prompt, max_tokens, agent=AgentTurn()):
    r = request(prompt, max_tokens=max_tokens)
    r.context = RequestContext(session_id="agent-1", agent=agent)
    return r


def test_retained_blocks_taken_under_pressure_are_demoted_to_host_memory(llama_dir, make_engine):
    torch.set_num_threads(1)
    first = prompts(1, seed=51, min_len=24, max_len=24)[0]
    engine = tiered_engine(llama_dir, KVStoreConfig(host_bytes=1 << 20), num_blocks=32)
    try:
        out1 = tokens(run(engine, [r := _turn(first, 5, AgentTurn(expect_next_turn_s=60.0))])[r.request_id])
        settle(engine)
        assert engine.kv.pool.num_retained == 7                      # 28 computed tokens
        host = tiers_of(engine).stack["host"]
        host.remove(host.keys())                                     # the write-through copy is gone
        run(engine, [r := request(prompts(1, seed=52, min_len=110, max_len=110)[0], max_tokens=4)])
        settle(engine)
        assert engine.kv.pool.num_retained == 3 and tiers_of(engine).demoted == 4
        second = first + out1 + [7, 8, 9, 10, 11, 12, 13, 14]
        out2 = run(engine, [r := _turn(second, 4)])[r.request_id]
        assert out2[-1].num_cached_tokens == 28                      # 3 blocks on device, 4 from host
        assert host.counters.hits == 16
        settle(engine)
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()
    plain = make_engine(llama_dir, prefix_caching=False)
    assert tokens(run(plain, [r := request(second, max_tokens=4)])[r.request_id]) == tokens(out2)
