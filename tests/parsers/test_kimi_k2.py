import json

import pytest
from hypothesis import given, settings

from tandem.parsers.kimi_k2 import KIMI_K2
from tests.parsers.splitting import (
    CUTS, JSON_OBJECTS, LAYOUTS, assert_tools_split_invariant, check_generated_call, fixed_ids,
)

SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def call(call_id: str, args: str) -> str:
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"


EXAMPLES = [
    ("Let me check." + SB + call("functions.get_weather:0", '{"city": "Beijing"}')
     + call("functions.get_time:1", '{"tz":"CST"}') + SE, "Let me check.",
     [("functions.get_weather:0", "get_weather", '{"city": "Beijing"}'), ("functions.get_time:1", "get_time", '{"tz": "CST"}')]),
    (SB + call(" search:3 ", ' {"q": ["a", {"b": null}]} ') + SE, None, [("search:3", "search", '{"q": ["a", {"b": null}]}')]),
    ("Plain answer.", "Plain answer.", []),
    (SB + call("functions.no_index", "{}") + SE, call("functions.no_index", "{}"), []),
    (SB + call("functions.f:0", '{"a": 1,}') + "after" + SE, "}after", [("functions.f:0", "f", '{"a": 1}')]),
    (SB + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": \"cu", None,
     [("functions.f:0", "f", '{"a": "cu"}')]),
]


@pytest.mark.parametrize("text, content, calls", EXAMPLES)
def test_parse_exact(text, content, calls):
    result = KIMI_K2.parse(text, new_id=fixed_ids)
    assert result.content == content
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == calls


@pytest.mark.parametrize("text", [t for t, _, _ in EXAMPLES])
@settings(derandomize=True, max_examples=25)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(text, cuts):
    assert_tools_split_invariant(KIMI_K2, text, cuts)


@settings(derandomize=True, max_examples=40)
@given(obj=JSON_OBJECTS, layout=LAYOUTS, cuts=CUTS)
def test_generated_arguments_are_canonical(obj, layout, cuts):
    check_generated_call(KIMI_K2, SB + call("functions.tool:0", json.dumps(obj, **layout)) + SE, "tool", obj, cuts)


def test_needs_special_tokens():
    assert KIMI_K2.requires_special_tokens and SB in KIMI_K2.markers
