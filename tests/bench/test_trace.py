"""Trace replay: hash ids -> token blocks, scaling, and the ideal cache hit ratio."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tandem.bench.trace import (BlockTokens, TraceConfig, TraceRecord, ideal_cached_tokens,
                                read_trace, scaled_input_length, trace_workload)
from tandem.bench.vocab import TokenSpace


def write_trace(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [
    {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
    {"timestamp": 500, "input_length": 1536, "output_length": 20, "hash_ids": [1, 2, 3]},
    {"timestamp": 1500, "input_length": 700, "output_length": 5, "hash_ids": [1, 4]},
    {"timestamp": 2000, "input_length": 512, "output_length": 7, "hash_ids": [5]},
]


def test_equal_hash_ids_give_equal_tokens_at_any_position():
    blocks = BlockTokens(TokenSpace(0, 1000), tokens_per_block=8, seed=3)
    a = blocks.prompt([7, 9, 11], 24)
    b = blocks.prompt([9, 7], 16)
    assert a.dtype == np.int32 and a.shape == (24,)
    assert np.array_equal(a[:8], b[8:16])      # id 7
    assert np.array_equal(a[8:16], b[:8])      # id 9
    assert not np.array_equal(a[:8], a[8:16])  # different ids differ


def test_tokens_are_deterministic_by_seed():
    space = TokenSpace(0, 5000)
    a = BlockTokens(space, 16, seed=0).prompt([1, 2, 3], 48)
    assert np.array_equal(a, BlockTokens(space, 16, seed=0).prompt([1, 2, 3], 48))
    assert not np.array_equal(a, BlockTokens(space, 16, seed=1).prompt([1, 2, 3], 48))


def test_tokens_avoid_excluded_ids_and_stay_in_range():
    space = TokenSpace(0, 20, excluded=(0, 1, 2, 19))
    ids = BlockTokens(space, 16, seed=0).prompt(list(range(200)), 3200)
    assert ids.min() >= 3 and ids.max() <= 18
    assert len(set(ids.tolist())) == 16   # every allowed id is used


def test_partial_last_block_is_a_prefix_of_the_full_block():
    blocks = BlockTokens(TokenSpace(0, 1000), 16, seed=0)
    full = blocks.prompt([4, 5], 32)
    part = blocks.prompt([4, 5], 20)
    assert np.array_equal(part, full[:20])


def test_scaled_lengths_and_clamp():
    rec = TraceRecord(0, 1536, 10, (1, 2, 3))
    assert scaled_input_length(rec, TraceConfig(tokens_per_block=16)) == 48
    assert scaled_input_length(TraceRecord(0, 700, 1, (1, 4)), TraceConfig(tokens_per_block=16)) == 22
    assert scaled_input_length(rec, TraceConfig(tokens_per_block=16, max_input_tokens=40)) == 40


def test_ideal_cache_hits_on_a_hand_made_trace(tmp_path):
    recs = read_trace(write_trace(tmp_path / "t.jsonl", ROWS))
    cfg = TraceConfig(tokens_per_block=16)
    # lengths 32, 48, 22 (blocks 1 full + 4 partial: 6 tokens), 16
    # hits:   0, 32 (1, 2), 16 (1), 0
    assert ideal_cached_tokens(recs, cfg) == [0, 32, 16, 0]
    wl = trace_workload(tmp_path / "t.jsonl", TokenSpace(0, 1000), cfg)
    assert wl.ideal_cached_ratio() == pytest.approx(48 / (32 + 48 + 22 + 16))


def test_ideal_counts_partial_repeats_by_tokens_sent_before():
    cfg = TraceConfig(tokens_per_block=16)
    recs = [TraceRecord(0, 512 + 128, 1, (1, 2)),   # 20 tokens: block 2 sends 4
            TraceRecord(0, 1024, 1, (1, 2)),         # 32 tokens: block 2 hits 4 of 16
            TraceRecord(0, 1024, 1, (1, 2))]         # now 16 + 16
    assert ideal_cached_tokens(recs, cfg) == [0, 20, 32]


def test_trace_workload_arrivals_are_time_scaled(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", ROWS)
    wl = trace_workload(path, TokenSpace(0, 1000), TraceConfig(time_scale=0.5))
    assert [s.arrival_s for s in wl.sessions] == [0.0, 0.25, 0.75, 1.0]
    assert [s.turns[0].max_tokens for s in wl.sessions] == [10, 20, 5, 7]
    first, second = wl.sessions[0].turns[0], wl.sessions[1].turns[0]
    assert np.array_equal(first.prompt_token_ids, second.prompt_token_ids[:32])
    assert wl.uses_token_ids


def test_poisson_rate_and_max_requests(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", ROWS)
    wl = trace_workload(path, TokenSpace(0, 1000), TraceConfig(request_rate=10.0, max_requests=3))
    arrivals = [s.arrival_s for s in wl.sessions]
    assert len(arrivals) == 3 and arrivals[0] == 0.0 and arrivals == sorted(arrivals)


def test_bad_trace_line_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 3}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_trace(path)


def test_real_mooncake_trace_loads_with_ideal_ratio_between_0_and_1():
    from pathlib import Path
    path = Path(__file__).resolve().parents[3] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
    if not path.exists():
        pytest.skip("shared traces not present")
    wl = trace_workload(path, TokenSpace(0, 32000), TraceConfig(max_requests=200))
    assert len(wl.sessions) == 200
    assert 0.0 < wl.ideal_cached_ratio() < 1.0
