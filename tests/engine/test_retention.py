"""KV retention across tool calls on the tiny model: four agent sessions end their turn in a tool
call (two by their output's tool-call marker, two by the client's hint), one-shot prompts flow
through a small cache during the pause, then every session's next turn arrives. With retention
the next turns find their whole previous context cached; with it off (today's LRU) none of it.
Greedy output is the same either way, and every block is free once all is done."""

import time
from dataclasses import replace

import torch

from tandem.config import RetentionConfig
from tandem.engine.engine import Engine
from tandem.types import AgentTurn, RequestContext
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens

TURN1_LEN, TURN1_OUT = 36, 9     # 45 tokens: 44 computed at finish, 11 full blocks of 4
NUM_BLOCKS = 96                  # sessions retain 4 x 11 = 44 blocks, within a 0.5 share (48)


def _session(prompt, sid, agent=AgentTurn(), max_tokens=TURN1_OUT):
    r = request(prompt, max_tokens=max_tokens)
    r.context = RequestContext(session_id=sid, tenant="key-0", agent=agent)
    return r


def _play(llama_dir, share: float, markers: list[str] | None):
    """Turn 1 of four sessions, twelve one-shots one after another, turn 2 of the sessions.
    Returns every output, the turn-2 cached tokens and the engine (idle)."""
    torch.set_num_threads(1)
    cfg = replace(engine_config(llama_dir, num_blocks=NUM_BLOCKS),
                  retention=RetentionConfig(share=share, default_gap_s=60.0))
    engine = Engine.from_config(cfg)
    try:
        firsts = prompts(4, seed=31, min_len=TURN1_LEN, max_len=TURN1_LEN)
        agents = [AgentTurn(tool_call_markers=(markers[i],)) if markers else AgentTurn()
                  for i in range(2)] + [AgentTurn(expect_next_turn_s=60.0)] * 2
        turn1 = [_session(p, f"s{i}", agents[i]) for i, p in enumerate(firsts)]
        out1 = run(engine, turn1)
        outs = [tokens(out1[r.request_id]) for r in turn1]
        texts = ["".join(d.new_text for d in out1[r.request_id]) for r in turn1]
        one_shot_out = []
        for p in prompts(12, seed=32, min_len=60, max_len=60):   # 16 blocks each, 192 in all
            one = run(engine, [r := request(p, max_tokens=4)])[r.request_id]
            one_shot_out.append(tokens(one))
        tool_result = [7, 8, 9, 10, 11, 12, 13, 14]
        turn2 = [_session(p + o + tool_result, f"s{i}", max_tokens=4)
                 for i, (p, o) in enumerate(zip(firsts, outs))]
        out2 = run(engine, turn2)
        cached = [out2[r.request_id][-1].num_cached_tokens for r in turn2]
        outs2 = [tokens(out2[r.request_id]) for r in turn2]
        assert_all_blocks_free(engine)
        return (outs, one_shot_out, outs2), texts, cached, engine
    except BaseException:
        engine.shutdown()
        raise


def test_retention_keeps_agent_context_through_one_shot_pressure(llama_dir):
    off_out, texts, off_cached, off = _play(llama_dir, share=0.0, markers=None)
    off.shutdown()
    # the tool-call marker of sessions 0 and 1: text their first turn writes (greedy: the same
    # text with retention on)
    markers = [t[:3] for t in texts[:2]]
    assert all(markers)
    on_out, _, on_cached, on = _play(llama_dir, share=0.5, markers=markers)
    try:
        previous = TURN1_LEN + TURN1_OUT
        assert all(c >= 0.9 * previous for c in on_cached), on_cached
        assert all(c < 0.1 * previous for c in off_cached), off_cached
        assert on_out == off_out                     # greedy output unchanged by retention
        stats = on.stats()
        assert stats.retention_hits == 4 and stats.retention_evicted_blocks == 0
        assert stats.turn_gap_counts[-1] == 4        # four gaps observed (cumulative +Inf bucket)
        assert stats.retained_blocks == 0            # every hold ended at its next turn
        assert on.kv.pool.num_holds == 0
        assert on.kv.pool.num_free == on.num_blocks
    finally:
        on.shutdown()


def test_retained_blocks_are_taken_last_and_released_at_their_deadline(llama_dir):
    """A session retained with a hint keeps its blocks while a one-shot needs less than the
    unretained rest; at its deadline the hold ends and the blocks are cold (taken first)."""
    torch.set_num_threads(1)
    engine = Engine.from_config(replace(engine_config(llama_dir, num_blocks=32),
                                        retention=RetentionConfig(share=0.5)))
    try:
        p = prompts(1, seed=41, min_len=24, max_len=24)[0]
        run(engine, [_session(p, "a", AgentTurn(expect_next_turn_s=30.0), max_tokens=5)])
        held = engine.kv.pool.num_retained
        assert held == 7                                 # 28 computed tokens: 7 full blocks
        one = prompts(1, seed=42, min_len=60, max_len=60)[0]   # 16 blocks: the unretained suffice
        run(engine, [request(one, max_tokens=4)])
        assert engine.kv.pool.num_retained == held
        one = prompts(1, seed=43, min_len=110, max_len=110)[0]  # 113 tokens computed: 29 blocks
        run(engine, [request(one, max_tokens=4)])
        assert engine.kv.pool.num_retained == held - 4   # the 25 unretained, then 4 retained
        assert engine.stats().retention_evicted_blocks == 4
        engine.retention.expire(float("inf"))
        assert engine.kv.pool.num_retained == 0 and engine.retention.expired == 1
        assert engine.kv.pool.num_holds == 0
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def _beside_a_flood(llama_dir, flood_priority: int, flood: tuple[int, int, int] = (6, 60, 4)):
    """Turn 1 of four priority-0 sessions (hinted), then priority-`flood_priority` one-shots at
    once (`flood`: how many, prompt length, output length; by default six of 16 blocks each: 96
    blocks, more than the 52 no hold lists), then turn 2. Returns the outputs, the turn-2 cached
    tokens and the retained blocks the one-shots took."""
    torch.set_num_threads(1)
    cfg = replace(engine_config(llama_dir, num_blocks=NUM_BLOCKS),
                  retention=RetentionConfig(share=0.5, default_gap_s=60.0))
    engine = Engine.from_config(cfg)
    try:
        firsts = prompts(4, seed=31, min_len=TURN1_LEN, max_len=TURN1_LEN)
        turn1 = [_session(p, f"s{i}", AgentTurn(expect_next_turn_s=60.0)) for i, p in enumerate(firsts)]
        out1 = run(engine, turn1)
        outs = [tokens(out1[r.request_id]) for r in turn1]
        count, prompt_len, out_len = flood
        flood = [request(p, max_tokens=out_len)
                 for p in prompts(count, seed=33, min_len=prompt_len, max_len=prompt_len)]
        for r in flood:
            r.context = RequestContext(priority=flood_priority)
        flood_out = run(engine, flood)
        taken = engine.stats().retention_evicted_blocks
        turn2 = [_session(p + o + [7, 8, 9, 10], f"s{i}", max_tokens=4)
                 for i, (p, o) in enumerate(zip(firsts, outs))]
        out2 = run(engine, turn2)
        cached = [out2[r.request_id][-1].num_cached_tokens for r in turn2]
        result = (outs, [tokens(flood_out[r.request_id]) for r in flood],
                  [tokens(out2[r.request_id]) for r in turn2])
        assert_all_blocks_free(engine)
        return result, cached, taken
    finally:
        engine.shutdown()


def test_a_flood_of_worse_priority_waits_for_blocks_rather_than_take_retained_ones(llama_dir):
    worse, worse_cached, worse_taken = _beside_a_flood(llama_dir, flood_priority=10)
    equal, equal_cached, equal_taken = _beside_a_flood(llama_dir, flood_priority=0)
    previous = TURN1_LEN + TURN1_OUT
    # priority 10: the one-shots ran three at a time in the unretained blocks; every session's
    # next turn finds its whole previous context
    assert worse_taken == 0 and all(c >= 0.9 * previous for c in worse_cached), worse_cached
    # priority 0, like the sessions: the one-shots took retained blocks (demoted or lost)
    assert equal_taken > 0 and min(equal_cached) < 0.9 * previous, equal_cached
    assert worse == equal                          # greedy outputs do not depend on the order


def test_worse_priority_requests_growing_past_the_unretained_blocks_give_way_to_each_other(llama_dir):
    # three one-shots of 5-block prompts, each growing to 20 blocks while decoding: 60 blocks,
    # more than the 52 no hold lists. At priority 10 the latest admitted is preempted (and
    # computed again later) instead of taking retained blocks; at priority 0 they take them.
    flood = (3, 20, 60)
    worse, worse_cached, worse_taken = _beside_a_flood(llama_dir, 10, flood)
    equal, equal_cached, equal_taken = _beside_a_flood(llama_dir, 0, flood)
    previous = TURN1_LEN + TURN1_OUT
    assert worse_taken == 0 and all(c >= 0.9 * previous for c in worse_cached), worse_cached
    assert equal_taken > 0 and min(equal_cached) < 0.9 * previous, equal_cached
    assert worse == equal


def test_a_worse_priority_request_that_fits_only_in_retained_blocks_waits_out_its_aging(llama_dir):
    """Nothing else runs: the priority-10 one-shot needs 29 blocks, 25 are unretained. It waits
    (the engine does not spin: has_runnable is False between steps) until aged to the holds'
    level, 10 x 0.1 s, then takes 4 retained blocks."""
    torch.set_num_threads(1)
    cfg = engine_config(llama_dir, num_blocks=32)
    cfg = replace(cfg, retention=RetentionConfig(share=0.5),
                  scheduler=replace(cfg.scheduler, priority_aging_s=0.1))
    engine = Engine.from_config(cfg)
    try:
        p = prompts(1, seed=41, min_len=24, max_len=24)[0]
        run(engine, [_session(p, "a", AgentTurn(expect_next_turn_s=30.0), max_tokens=5)])
        assert engine.kv.pool.num_retained == 7
        one = request(prompts(1, seed=43, min_len=110, max_len=110)[0], max_tokens=4)
        one.context = RequestContext(priority=10)
        engine.add_request(one)
        engine.step()
        assert not engine.scheduler.running and not engine.has_runnable()   # waiting, not spinning
        started, deltas = time.monotonic(), []
        while engine.requests and time.monotonic() - started < 20:
            if not engine.has_runnable():
                time.sleep(0.01)
            deltas += engine.step()
        waited = time.monotonic() - started
        assert not engine.requests and sum(len(d.new_token_ids) for d in deltas) == 4
        assert waited >= 0.8, waited                     # aged ten levels of 0.1 s (from arrival)
        assert engine.stats().retention_evicted_blocks == 4
        engine.retention.expire(float("inf"))
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()
