"""The retention policy (tandem/kv/retention.py): how a turn's end is read, gap learning with its
default and cap, the hint's clamp, the share bound and the release order."""

import pytest

from tandem.config import RetentionConfig
from tandem.kv.retention import (GapEstimate, TurnEnd, expected_gap, first_to_release, observe,
                                 over_share, retain_for, share_limit, turn_end)
from tandem.types import AgentTurn, FinishReason

CFG = RetentionConfig(share=0.5, default_gap_s=5.0, min_gap_s=1.0, max_s=600.0, alpha=0.5, deviations=2.0)
TOOLS = AgentTurn(tool_call_markers=("<tool_call>",))


def test_a_tool_call_or_a_hint_retains_a_final_answer_ends_the_session():
    stop, length = FinishReason.STOP, FinishReason.LENGTH
    assert turn_end(stop, 'ok <tool_call>{"name": "f"}', TOOLS, True) is TurnEnd.RETAIN
    assert turn_end(stop, "the answer is 4", TOOLS, True) is TurnEnd.ENDED
    assert turn_end(stop, "hello there", AgentTurn(), True) is TurnEnd.NONE     # chat: the user may reply
    assert turn_end(stop, "x", AgentTurn(expect_next_turn_s=3.0), True) is TurnEnd.RETAIN
    assert turn_end(stop, "<tool_call>", AgentTurn(expect_next_turn_s=0.0), True) is TurnEnd.ENDED
    assert turn_end(length, "cut short", AgentTurn(), True) is TurnEnd.NONE
    assert turn_end(length, "<tool_call>{", TOOLS, True) is TurnEnd.RETAIN
    for reason in (FinishReason.ABORT, FinishReason.ERROR, None):   # None: handed over
        assert turn_end(reason, "<tool_call>", TOOLS, True) is TurnEnd.NONE
    hinted = AgentTurn(expect_next_turn_s=3.0)
    assert turn_end(None, "", hinted, True) is TurnEnd.RETAIN           # a prefill worker, hinted
    assert turn_end(FinishReason.ABORT, "", hinted, True) is TurnEnd.NONE
    assert turn_end(stop, "<tool_call>", TOOLS, False) is TurnEnd.NONE   # no session


def test_gaps_are_learned_as_mean_plus_deviations_and_held_to_the_bounds():
    assert expected_gap(None, None, CFG) == 5.0                       # the default
    one = observe(None, 2.0, CFG)
    assert one == GapEstimate(2.0, 1.0, 1)
    assert expected_gap(one, None, CFG) == 4.0                        # 2 + 2 x 1
    two = observe(one, 4.0, CFG)                                      # alpha 0.5
    assert two == GapEstimate(3.0, 1.5, 2)
    assert expected_gap(two, None, CFG) == 6.0
    steady = None
    for _ in range(40):
        steady = observe(steady, 3.0, CFG)
    assert expected_gap(steady, None, CFG) == pytest.approx(3.0, abs=1e-6)   # no spread: the mean
    assert expected_gap(observe(None, 0.01, CFG), None, CFG) == 1.0         # min_gap_s
    assert expected_gap(observe(None, 1e9, CFG), None, CFG) == 600.0        # capped (gap clamped too)
    assert observe(None, 1e9, CFG).mean == 600.0


def test_a_session_without_gaps_borrows_its_tenants_then_the_default():
    tenant = observe(None, 10.0, CFG)
    assert expected_gap(None, tenant, CFG) == 20.0
    assert expected_gap(observe(None, 2.0, CFG), tenant, CFG) == 4.0   # its own first


def test_a_hint_replaces_the_estimate_and_is_clamped_to_max_s():
    learned = observe(None, 2.0, CFG)
    # the hint plus half of it and min_gap_s: the next turn also waits at the gateway and in transit
    assert retain_for(AgentTurn(expect_next_turn_s=30.0), learned, None, CFG) == 46.0
    assert retain_for(AgentTurn(expect_next_turn_s=3600.0), learned, None, CFG) == 600.0
    tight = RetentionConfig(share=0.5, hint_slack=0.0, min_gap_s=0.5, default_gap_s=5.0)
    assert retain_for(AgentTurn(expect_next_turn_s=3.0), learned, None, tight) == 3.5
    assert retain_for(TOOLS, learned, None, CFG) == 4.0


def test_share_bound_and_release_order():
    assert share_limit(96, CFG) == 48
    assert share_limit(96, RetentionConfig(share=0.0)) == 0 and not RetentionConfig(share=0.0).enabled
    assert over_share(40, 8, 48) == 0
    assert over_share(40, 11, 48) == 3
    # holds due after the new one's deadline give way, the latest due first
    assert first_to_release([("b", 5.0), ("a", 1.0), ("c", 3.0)], 0.0) == ["b", "c", "a"]
    assert first_to_release([("b", 5.0), ("a", 1.0), ("c", 3.0)], 3.0) == ["b"]


def test_config_refuses_a_share_outside_zero_one():
    with pytest.raises(ValueError):
        RetentionConfig(share=1.5)
    with pytest.raises(ValueError):
        RetentionConfig(default_gap_s=700.0)
