"""Transcripts over generated tools: calls valid and copied from the request, no call where words are right."""

from __future__ import annotations

import json

import pytest

from tandem_demo.agent_transcripts import tool_call_turns
from tandem_demo.chat_template import compile_template, render
from tandem_demo.kjv import Verse
from tandem_demo.pool_transcripts import make_pool_transcript, no_call_turns
from tandem_demo.schema_check import check_tool_call
from tandem_demo.tools import tools_by_name

VERSES = (Verse("Genesis", 1, 1, "In the beginning God created the heaven and the earth."),
          Verse("John", 1, 1, "In the beginning was the Word."))


@pytest.fixture(scope="module")
def transcripts():
    return {split: [make_pool_transcript(3, split, i, VERSES) for i in range(400)] for split in ("train", "heldout")}


def test_generation_is_a_pure_function_of_seed_split_index():
    assert make_pool_transcript(3, "train", 7, VERSES) == make_pool_transcript(3, "train", 7, VERSES)
    assert make_pool_transcript(3, "train", 7, VERSES) != make_pool_transcript(3, "train", 8, VERSES)


def test_every_call_validates_and_copies_the_values_the_user_gave(transcripts):
    calls = 0
    for tr in transcripts["train"] + transcripts["heldout"]:
        if not tr["tools"]:
            continue
        schemas = tools_by_name(tr["tools"])
        for i in tool_call_turns(tr):
            user = tr["messages"][i - 1]["content"]
            for c in tr["messages"][i]["tool_calls"]:
                body = json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
                assert check_tool_call(body, schemas).ok, body
                for value in c["function"]["arguments"].values():
                    if not isinstance(value, bool):
                        assert str(value) in user, (value, user)
                calls += 1
    assert calls > 500


def test_no_call_where_none_is_offered_and_word_turns_exist_with_tools(transcripts):
    trs = transcripts["train"]
    bare = [t for t in trs if t["tools"] is None]
    assert 0.08 < len(bare) / len(trs) < 0.25
    for t in bare:
        assert not tool_call_turns(t)
        assert all(m["role"] in ("system", "user", "assistant") for m in t["messages"])
    offered_words = sum(len(no_call_turns(t)) for t in trs if t["tools"])
    assert offered_words > 50
    for t in trs:
        for i in no_call_turns(t):
            assert "<tool_call>" not in t["messages"][i]["content"]


def test_multi_turn_and_parallel_calls_occur(transcripts):
    trs = transcripts["train"]
    assert any(len(tool_call_turns(t)) >= 2 for t in trs)          # follow-up requests after a tool result
    assert any(len(t["messages"][i]["tool_calls"]) == 2 for t in trs for i in tool_call_turns(t))


def test_held_out_transcripts_use_tool_names_absent_from_training(transcripts):
    names = {split: {t["function"]["name"] for tr in trs for t in tr["tools"] or []}
             for split, trs in transcripts.items()}
    assert names["heldout"] and not names["heldout"] & names["train"]


def test_renders_in_the_chat_format():
    template = compile_template()
    for i in range(30):
        tr = make_pool_transcript(3, "train", i, VERSES)
        text = render(template, tr["messages"], tr["tools"])
        assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n")
        assert ("<tools>" in text) == bool(tr["tools"])


def test_the_drill_layout_is_short_and_mostly_one_call():
    """pool-drill: one exchange over one to three tools, most of them a call; calls as valid as in
    the full layout; the held-out tools stay disjoint from training's."""
    drills = [make_pool_transcript(3, "train", i, VERSES, drill=True) for i in range(400)]
    full = [make_pool_transcript(3, "train", i, VERSES) for i in range(400)]
    assert drills != full
    with_tools = [t for t in drills if t["tools"]]
    assert all(1 <= len(t["tools"]) <= 3 for t in with_tools)
    assert all(sum(m["role"] == "user" for m in t["messages"]) == 1 for t in with_tools)
    calls = [t for t in with_tools if tool_call_turns(t)]
    assert len(calls) / len(drills) > 0.7
    for t in calls:
        (i,) = tool_call_turns(t)
        for c in t["messages"][i]["tool_calls"]:
            body = json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
            assert check_tool_call(body, tools_by_name(t["tools"])).ok, body
    def first_calls_per_char(trs):   # a transcript's first call must read the list; later ones may copy it
        return sum(bool(t["tools"] and tool_call_turns(t)) for t in trs) / sum(len(json.dumps(t)) for t in trs)
    assert first_calls_per_char(drills) > 1.3 * first_calls_per_char(full)
    held = {f["function"]["name"] for i in range(200)
            for f in make_pool_transcript(3, "heldout", i, VERSES, drill=True)["tools"] or []}
    assert held and not held & {f["function"]["name"] for t in with_tools for f in t["tools"]}


def test_the_wide_layout_offers_six_to_twelve_distinct_tools_and_calls_copy_the_request():
    wide = [make_pool_transcript(3, "train", i, VERSES, wide=True) for i in range(150)]
    with_tools = [t for t in wide if t["tools"]]
    assert len(with_tools) > 100
    counts = {len(t["tools"]) for t in with_tools}
    assert min(counts) >= 6 and max(counts) <= 12 and len(counts) >= 4
    calls = 0
    for t in with_tools:
        names = [s["function"]["name"] for s in t["tools"]]
        assert len(set(names)) == len(names)
        for i in tool_call_turns(t):
            for c in t["messages"][i]["tool_calls"]:
                body = json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
                assert check_tool_call(body, tools_by_name(t["tools"])).ok, body
                for value in c["function"]["arguments"].values():
                    if not isinstance(value, bool):
                        assert str(value) in t["messages"][i - 1]["content"], value
                calls += 1
    assert calls > 100
