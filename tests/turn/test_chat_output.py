"""Per-choice output parsing: call ids made from the request, choice and index (the same streamed or
not), any split of the text gives the same result, parallel_tool_calls false keeps the first call."""

from __future__ import annotations

import random

from tandem.parsers import OutputParser, ToolCallArguments, ToolCallStart, make_reasoning_parser, make_tool_parser
from tandem.turn.chat_output import ChatOutputSpec, call_id_factory

CALLS = ('<think>weather, then time</think>\n\nLet me check.'
         '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>')
SPEC = ChatOutputSpec(OutputParser(make_reasoning_parser("qwen3"), make_tool_parser("hermes")))


def test_ids_are_deterministic_per_request_choice_and_index():
    ids = call_id_factory("chatcmpl-1", 0)
    assert ids(0) == call_id_factory("chatcmpl-1", 0)(0) and ids(0).startswith("call_")
    assert len(ids(0)) == 5 + 24 and ids(0) != ids(1) != call_id_factory("chatcmpl-1", 1)(1)
    short = call_id_factory("chatcmpl-1", 0, short=True)(0)
    assert len(short) == 9 and short.isalnum()
    mistral = ChatOutputSpec(OutputParser(None, make_tool_parser("mistral")))
    out = mistral.parse('[TOOL_CALLS]f[ARGS]{"a": 1}', "r")
    assert len(out.tool_calls[0].id) == 9


def test_any_split_streams_the_same_result():
    whole = SPEC.parse(CALLS, "rid", 0)
    assert whole.reasoning == "weather, then time" and whole.content == "Let me check."
    assert [(c.name, c.arguments) for c in whole.tool_calls] == [
        ("get_weather", '{"city": "Paris"}'), ("get_time", '{"zone": "CET"}')]
    rng = random.Random(0)
    for _ in range(20):
        out = SPEC.stream("rid", 0)
        cuts = sorted(rng.sample(range(1, len(CALLS)), 8))
        pieces = [CALLS[a:b] for a, b in zip([0, *cuts], [*cuts, len(CALLS)])]
        for p in pieces:
            out.feed(p)
        out.finish()
        assert out.result() == whole and out.num_tool_calls == 2


def test_parallel_tool_calls_false_keeps_the_first_call():
    spec = ChatOutputSpec(SPEC.parser, parallel_tool_calls=False)
    out = spec.stream("rid")
    events = out.feed(CALLS) + out.finish()
    calls = [e for e in events if isinstance(e, (ToolCallStart, ToolCallArguments))]
    assert {e.index for e in calls} == {0} and out.num_tool_calls == 1
    assert [c.name for c in out.result().tool_calls] == ["get_weather"]
