"""Agentic session generator: deterministic, tenants share prefixes, planned ideal hits."""

from __future__ import annotations

import pytest

from tandem.bench.agentic import AgenticConfig, agentic_workload


def test_deterministic_by_seed():
    a = agentic_workload(AgenticConfig(seed=5))
    assert a == agentic_workload(AgenticConfig(seed=5))
    assert a != agentic_workload(AgenticConfig(seed=6))


def test_tenants_share_system_prompt_and_sessions_are_distinct():
    wl = agentic_workload(AgenticConfig(num_sessions=4, num_tenants=2, turns=3, system_tokens=50,
                                        tool_tokens=40, num_tools=4))
    s = wl.sessions
    assert [x.tenant for x in s] == ["tenant-0", "tenant-1", "tenant-0", "tenant-1"]
    assert s[0].base_messages[0] == s[2].base_messages[0]        # same tenant, same system prompt
    assert s[0].base_messages[0] != s[1].base_messages[0]
    assert s[0].base_messages[1] != s[2].base_messages[1]        # different tasks
    assert len({x.session_id for x in s}) == 4 and all(x.affinity for x in s)
    assert "t0_tool_3" in s[0].base_messages[0]["content"]       # tools in the system prompt
    assert s[0].tools is None


def test_turns_append_tool_results_and_think_times():
    wl = agentic_workload(AgenticConfig(num_sessions=1, turns=3, tool_result_tokens=7, think_time_s=2.0))
    turns = wl.sessions[0].turns
    assert turns[0].new_messages == () and turns[0].think_time_s == 0.0
    for t in turns[1:]:
        (msg,) = t.new_messages
        assert msg["role"] == "user" and len(msg["content"].split()) == 2 + 7
        assert t.think_time_s > 0


def test_send_tools_puts_definitions_in_the_request():
    wl = agentic_workload(AgenticConfig(num_sessions=1, num_tools=3, send_tools=True))
    assert [t["function"]["name"] for t in wl.sessions[0].tools] == ["t0_tool_0", "t0_tool_1", "t0_tool_2"]
    assert "# Tools" not in wl.sessions[0].base_messages[0]["content"]


def test_planned_ideal_hits():
    cfg = AgenticConfig(num_sessions=2, num_tenants=1, turns=2, system_tokens=100, tool_tokens=0,
                        num_tools=0, user_tokens=10, tool_result_tokens=20, output_tokens=5)
    s0, s1 = agentic_workload(cfg).sessions
    prefix = 100 + 6
    assert s0.turns[0].ideal_cached_tokens == 0                 # tenant's first session
    assert s1.turns[0].ideal_cached_tokens == prefix            # same tenant: system prompt hits
    first = s0.turns[0].expected_prompt_tokens
    assert first == prefix + 10 + 2
    assert s0.turns[1].ideal_cached_tokens == first + 5         # all of turn 0 and its answer
    assert s0.turns[1].expected_prompt_tokens == first + 5 + 20 + 3


def test_session_rate_gives_increasing_arrivals():
    wl = agentic_workload(AgenticConfig(num_sessions=5, session_rate=2.0))
    arrivals = [s.arrival_s for s in wl.sessions]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals) and arrivals[-1] > 0


def test_rejects_empty_workloads():
    with pytest.raises(ValueError):
        agentic_workload(AgenticConfig(num_sessions=0))


def test_uniform_think_time_range():
    wl = agentic_workload(AgenticConfig(num_sessions=20, turns=5, think_time_range_s=(0.5, 10.0)))
    pauses = [t.think_time_s for s in wl.sessions for t in s.turns[1:]]
    assert len(pauses) == 80 and all(0.5 <= p <= 10.0 for p in pauses)
    assert min(pauses) < 2.0 and max(pauses) > 8.5              # spread over the range, not a mean
    assert all(s.turns[0].think_time_s == 0.0 for s in wl.sessions)
    fixed = agentic_workload(AgenticConfig(num_sessions=2, turns=3, think_time_range_s=(3.0, 3.0)))
    assert {t.think_time_s for s in fixed.sessions for t in s.turns[1:]} == {3.0}
    with pytest.raises(ValueError, match="think time range"):
        agentic_workload(AgenticConfig(think_time_range_s=(5.0, 1.0)))


def test_sessions_without_the_affinity_header():
    wl = agentic_workload(AgenticConfig(num_sessions=3, affinity_header=False))
    assert not any(s.affinity for s in wl.sessions)
