"""The plain-JSON calls of a forced tool_choice on a model without a tool-call parser: the list of
`{name, parameters}` ("required") and a named function's bare arguments, parsed and streamed."""

import json

import pytest
from hypothesis import given, settings

from tandem.parsers.forced_json import JSON_ARGUMENTS, JSON_LIST
from tests.parsers.splitting import (
    CUTS,
    JSON_OBJECTS,
    LAYOUTS,
    assert_tools_split_invariant,
    check_generated_call,
    fixed_ids,
)

WEATHER = [{"type": "function", "function": {"name": "get_weather"}}]

LISTS = [
    ('[{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "add", "parameters": {"a": 3.5}}]',
     None, [("get_weather", '{"city": "Paris"}'), ("add", '{"a": 3.5}')]),
    ('  [{"name": "f", "parameters": {}}]', None, [("f", "{}")]),
    ('[{"name": "f", "arguments": {"x": [1, 2]}}]', None, [("f", '{"x": [1, 2]}')]),
    ('[{"name": "f", "parameters": {"a": "cut sh', None, [("f", '{"a": "cut sh"}')]),
    ("[]", None, []),
    ("No JSON at all.", "No JSON at all.", []),
    ('[{"what": 1}]', '[{"what": 1}]', []),
]
ARGUMENTS = [
    ('{"city": "Paris", "days": 2}', None, [("get_weather", '{"city": "Paris", "days": 2}')]),
    ('{}', None, [("get_weather", "{}")]),
    ('{"city": "Par', None, [("get_weather", '{"city": "Par"}')]),
    ("plain text", "plain text", []),
]


@pytest.mark.parametrize("parser,tools,text,content,calls",
                         [(JSON_LIST, None, *e) for e in LISTS] + [(JSON_ARGUMENTS, WEATHER, *e) for e in ARGUMENTS])
def test_parse_exact(parser, tools, text, content, calls):
    result = parser.parse(text, tools, new_id=fixed_ids)
    assert result.content == content
    assert [(c.name, c.arguments) for c in result.tool_calls] == calls


@pytest.mark.parametrize("parser,tools,text",
                         [(JSON_LIST, None, t) for t, _, _ in LISTS] + [(JSON_ARGUMENTS, WEATHER, t) for t, _, _ in ARGUMENTS])
@settings(derandomize=True, max_examples=25)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(parser, tools, text, cuts):
    assert_tools_split_invariant(parser, text, cuts, tools)


@settings(derandomize=True, max_examples=40)
@given(obj=JSON_OBJECTS, layout=LAYOUTS, cuts=CUTS)
def test_generated_arguments_are_canonical(obj, layout, cuts):
    check_generated_call(JSON_ARGUMENTS, json.dumps(obj, **layout), "get_weather", obj, cuts, WEATHER)
    check_generated_call(JSON_LIST, '[{"name": "tool", "parameters": ' + json.dumps(obj, **layout) + "}]",
                         "tool", obj, cuts)


def test_not_model_formats():
    assert not JSON_LIST.requires_special_tokens and not JSON_ARGUMENTS.markers
