import json

import pytest
from hypothesis import given, settings

from tandem.parsers.llama3_json import LLAMA3_JSON
from tests.parsers.splitting import (
    CUTS, JSON_OBJECTS, LAYOUTS, assert_tools_split_invariant, check_generated_call, fixed_ids,
)

EXAMPLES = [
    ('{"name": "get_weather", "parameters": {"city": "San Francisco, CA"}}', None,
     [("get_weather", '{"city": "San Francisco, CA"}')]),
    ('<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": [true, null]}}', None,
     [("a", '{"x": 1}'), ("b", '{"y": [true, null]}')]),
    ('\n  {"type": "function", "name": "search", "parameters": {"query": "llama"}}', None,
     [("search", '{"query": "llama"}')]),
    ('{"name": "f", "arguments": {"k": "v"}}\n{"name": "g", "parameters": {}}', None, [("f", '{"k": "v"}'), ("g", "{}")]),
    ('Let me search.<|python_tag|>{"name": "s", "parameters": {"q": "x"}}', "Let me search.", [("s", '{"q": "x"}')]),
    ("Paris is the capital of France.", "Paris is the capital of France.", []),
    # JSON not at the start and without the tag is content; a JSON answer is content
    ('Here: {"name": "f", "parameters": {}}', 'Here: {"name": "f", "parameters": {}}', []),
    ('{"capital": "Paris"}', '{"capital": "Paris"}', []),
    ('{"name": "f", "parameters": {}}; trailing words', "; trailing words", [("f", "{}")]),
    ('<|python_tag|>brave_search.call(query="weather")', '<|python_tag|>brave_search.call(query="weather")', []),
    ('{"name": "f", "parameters": {"a": "cut', None, [("f", '{"a": "cut"}')]),
    ('{"name": "f", "param', '{"name": "f", "param', []),
]


@pytest.mark.parametrize("text, content, calls", EXAMPLES)
def test_parse_exact(text, content, calls):
    result = LLAMA3_JSON.parse(text, new_id=fixed_ids)
    assert result.content == content
    assert [(c.name, c.arguments) for c in result.tool_calls] == calls


@pytest.mark.parametrize("text", [t for t, _, _ in EXAMPLES])
@settings(derandomize=True, max_examples=25)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(text, cuts):
    assert_tools_split_invariant(LLAMA3_JSON, text, cuts)


@settings(derandomize=True, max_examples=40)
@given(obj=JSON_OBJECTS, layout=LAYOUTS, cuts=CUTS)
def test_generated_arguments_are_canonical(obj, layout, cuts):
    text = '<|python_tag|>{"name": "tool", "parameters": ' + json.dumps(obj, **layout) + "}"
    check_generated_call(LLAMA3_JSON, text, "tool", obj, cuts)


def test_does_not_need_special_tokens():
    assert LLAMA3_JSON.requires_special_tokens is False
    assert "<|python_tag|>" in LLAMA3_JSON.markers
