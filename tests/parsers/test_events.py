import re

from tandem.parsers.events import (
    ContentDelta, ParsedOutput, ReasoningDelta, ToolCall, ToolCallArguments, ToolCallStart, collect,
    random_call_id, random_mistral_id,
)


def test_collect_assembles_content_reasoning_and_calls_in_order():
    events = [ReasoningDelta("why"), ContentDelta("Hi "), ContentDelta("there"),
              ToolCallStart(0, "a", "f"), ToolCallArguments(0, '{"x": '), ToolCallStart(1, "b", "g"),
              ToolCallArguments(0, "1}"), ToolCallArguments(1, "{}")]
    assert collect(events) == ParsedOutput("why", "Hi there", [ToolCall("a", "f", '{"x": 1}'),
                                                               ToolCall("b", "g", "{}")])


def test_collect_of_nothing_is_all_none():
    assert collect([]) == ParsedOutput(None, None, [])


def test_call_ids_have_the_documented_shapes():
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", random_call_id(0))
    assert re.fullmatch(r"[A-Za-z0-9]{9}", random_mistral_id(3))
    assert random_call_id(0) != random_call_id(0)
