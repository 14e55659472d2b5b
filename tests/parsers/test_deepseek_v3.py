import json

import pytest
from hypothesis import given, settings

from tandem.parsers.deepseek_v3 import DEEPSEEK_V3
from tests.parsers.splitting import (
    CUTS, JSON_OBJECTS, LAYOUTS, assert_tools_split_invariant, check_generated_call, fixed_ids,
)

B, E, S = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁sep｜>"
CB, CE = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"


def v3_call(name: str, args: str) -> str:
    return f"{CB}function{S}{name}\n```json\n{args}\n```{CE}"


EXAMPLES = [
    (B + v3_call("get_weather", '{"location": "Beijing"}') + "\n" + v3_call("get_time", '{"tz": "UTC+8"}') + E,
     None, [("get_weather", '{"location": "Beijing"}'), ("get_time", '{"tz": "UTC+8"}')]),
    ("I need the weather." + B + v3_call("get_weather", '{"location":"Paris","days":3}') + E,
     "I need the weather.", [("get_weather", '{"location": "Paris", "days": 3}')]),
    # V3.1 form: name before the separator, bare JSON
    (f'{B}{CB}get_weather{S}{{"location": "Paris"}}{CE}{E}', None, [("get_weather", '{"location": "Paris"}')]),
    # no fence
    (f'{B}{CB}function{S}f\n{{"a": 1}}{CE}{E}', None, [("f", '{"a": 1}')]),
    ("Just prose.", "Just prose.", []),
    (B + v3_call("bad name", "{}") + E, CB + "function" + S + "bad name\n```json\n{}\n```" + CE, []),
    (B + CB + "function" + S + "f\n```json\n" + '{"a": "cut', None, [("f", '{"a": "cut"}')]),
    (B + CB + "function" + S + "get_wea", CB + "function" + S + "get_wea", []),
]


@pytest.mark.parametrize("text, content, calls", EXAMPLES)
def test_parse_exact(text, content, calls):
    result = DEEPSEEK_V3.parse(text, new_id=fixed_ids)
    assert result.content == content
    assert [(c.name, c.arguments) for c in result.tool_calls] == calls


@pytest.mark.parametrize("text", [t for t, _, _ in EXAMPLES])
@settings(derandomize=True, max_examples=25)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(text, cuts):
    assert_tools_split_invariant(DEEPSEEK_V3, text, cuts)


@settings(derandomize=True, max_examples=40)
@given(obj=JSON_OBJECTS, layout=LAYOUTS, cuts=CUTS)
def test_generated_arguments_are_canonical(obj, layout, cuts):
    check_generated_call(DEEPSEEK_V3, B + v3_call("tool", json.dumps(obj, **layout)) + E, "tool", obj, cuts)


def test_needs_special_tokens():
    assert DEEPSEEK_V3.requires_special_tokens
    assert set(DEEPSEEK_V3.markers) >= {B, E, S, CB, CE}
