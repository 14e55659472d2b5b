from __future__ import annotations

import json

import pytest

from tandem_demo.agent_transcripts import make_transcript, tool_call_turns
from tandem_demo.kjv import parse_chapters
from tandem_demo.schema_check import validate
from tandem_demo.scenarios import TOOL_SCENARIOS
from tandem_demo.tools import tool_catalog, tools_by_name


@pytest.fixture(scope="module")
def verses(bible_text):
    return tuple(v for c in parse_chapters(bible_text) for v in c.verses)


def test_catalog_names_are_unique():
    names = [t["function"]["name"] for t in tool_catalog()]
    assert len(names) == len(set(names)) >= 12


@pytest.mark.parametrize("layout", ["sparse", "dense", "drill"])
def test_every_generated_call_validates_and_is_offered(verses, layout):
    calls = 0
    for i in range(600):
        tr = make_transcript(7, "train", i, verses, layout)
        schemas = tools_by_name(tr["tools"] or [])
        assert len(schemas) == len(tr["tools"] or [])
        for j in tool_call_turns(tr):
            for call in tr["messages"][j]["tool_calls"]:
                name, args = call["function"]["name"], call["function"]["arguments"]
                assert name in schemas, f"transcript {i}: {name} is not offered"
                assert validate(args, schemas[name]) == [], f"transcript {i}: {name} {args}"
                calls += 1
    assert calls > 600


def test_each_scenario_validates_many_draws(verses):
    import random

    schemas = tools_by_name(tool_catalog())
    for fn, _, tools in TOOL_SCENARIOS:
        rng = random.Random(fn.__name__)
        for _ in range(200):
            ex = fn(rng, verses)
            for step in ex.steps:
                assert len(step.calls) == len(step.results)
                for name, args in step.calls:
                    assert validate(args, schemas[name]) == [], (fn.__name__, args)
                    assert name in tools, f"{fn.__name__} calls {name}, not declared in TOOL_SCENARIOS"
                    json.dumps(args)


def test_results_follow_calls(verses):
    """Every assistant tool-call turn is followed by exactly one tool message per call."""
    for i in range(200):
        msgs = make_transcript(3, "heldout", i, verses)["messages"]
        for j, m in enumerate(msgs):
            if m.get("tool_calls"):
                n = len(m["tool_calls"])
                assert [x["role"] for x in msgs[j + 1: j + 1 + n]] == ["tool"] * n
                assert msgs[j + 1 + n]["role"] == "assistant"


def test_arguments_come_from_the_request(verses):
    """Spot-check consistency: the weather city and the e-mail address appear in the user's words."""
    for i in range(300):
        msgs = make_transcript(11, "train", i, verses)["messages"]
        for j, m in enumerate(msgs):
            for call in m.get("tool_calls") or []:
                user = next(x["content"] for x in reversed(msgs[:j]) if x["role"] == "user")
                args = call["function"]["arguments"]
                if call["function"]["name"] == "get_weather":
                    assert args["city"] in user
                if call["function"]["name"] == "calculator":
                    assert args["expression"] in user


def test_generation_is_deterministic(verses):
    assert make_transcript(5, "train", 42, verses) == make_transcript(5, "train", 42, verses)
    assert make_transcript(5, "train", 42, verses) != make_transcript(6, "train", 42, verses)


def _with_tools(verses, layout: str) -> list[dict]:
    """Transcripts 0-299 of seed 9 that offer tools."""
    return [tr for i in range(300) if (tr := make_transcript(9, "train", i, verses, layout))["tools"]]


def test_dense_layout_offers_few_tools_and_many_calls(verses):
    transcripts = _with_tools(verses, "dense")
    n_tools = [len(tr["tools"]) for tr in transcripts]
    n_calls = [len(tool_call_turns(tr)) for tr in transcripts]
    assert max(n_tools) <= 4 and min(n_tools) >= 2
    assert sum(n_calls) / len(n_calls) > 3.0


def test_drill_layout_is_short_and_calls_what_it_offers(verses):
    transcripts = _with_tools(verses, "drill")
    n_tools = [len(tr["tools"]) for tr in transcripts]
    thanks = ("Thank", "Thanks", "Great", "Perfect")
    n_requests = [sum(m["role"] == "user" and not m["content"].startswith(thanks) for m in tr["messages"])
                  for tr in transcripts]
    assert max(n_tools) <= 3 and min(n_tools) == 1
    assert all(n >= 1 for n in n_requests) and max(n_requests) <= 3   # 1-2 requests, maybe a greeting first
