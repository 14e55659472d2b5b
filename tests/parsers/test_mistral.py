import json
import re

import pytest
from hypothesis import given, settings

from tandem.parsers.mistral import MISTRAL
from tests.parsers.splitting import (
    CUTS, JSON_OBJECTS, LAYOUTS, assert_tools_split_invariant, check_generated_call, fixed_ids,
)

EXAMPLES = [
    # Mistral 7B v0.3 (before tokenizer v11): a JSON list
    ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "add", "arguments": {"a": 3.5, "b": 4}}]',
     None, [("get_weather", '{"city": "Paris"}'), ("add", '{"a": 3.5, "b": 4}')]),
    # tokenizer v11 (Mistral Small 3.1): name then arguments, one marker per call
    ('[TOOL_CALLS]get_weather{"city": "Paris"}[TOOL_CALLS]add{"a": 3.5, "b": 4}', None,
     [("get_weather", '{"city": "Paris"}'), ("add", '{"a": 3.5, "b": 4}')]),
    # v13+ with [ARGS]
    ('Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "東京"}', "Checking.", [("get_weather", '{"city": "東京"}')]),
    ('[TOOL_CALLS]get_weather[ARGS]{}', None, [("get_weather", "{}")]),
    ("No tools needed.", "No tools needed.", []),
    ("[TOOL_CALLS]bad name{}", "[TOOL_CALLS]bad name{}", []),
    ("[TOOL_CALLS]get_weather", "[TOOL_CALLS]get_weather", []),
    ('[TOOL_CALLS]f{"a": "cut sh', None, [("f", '{"a": "cut sh"}')]),
    ('[TOOL_CALLS] [{"name": "a", "arguments": {}}, {"what": 1}]', '{"what": 1}]', [("a", "{}")]),
    ('[TOOL_CALLS]f{"a": 1} and then text', " and then text", [("f", '{"a": 1}')]),
]


@pytest.mark.parametrize("text, content, calls", EXAMPLES)
def test_parse_exact(text, content, calls):
    result = MISTRAL.parse(text, new_id=fixed_ids)
    assert result.content == content
    assert [(c.name, c.arguments) for c in result.tool_calls] == calls


@pytest.mark.parametrize("text", [t for t, _, _ in EXAMPLES])
@settings(derandomize=True, max_examples=25)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(text, cuts):
    assert_tools_split_invariant(MISTRAL, text, cuts)


@settings(derandomize=True, max_examples=40)
@given(obj=JSON_OBJECTS, layout=LAYOUTS, cuts=CUTS)
def test_generated_arguments_are_canonical(obj, layout, cuts):
    check_generated_call(MISTRAL, "[TOOL_CALLS]tool[ARGS]" + json.dumps(obj, **layout), "tool", obj, cuts)


def test_ids_are_mistral_shaped_unless_the_model_wrote_one():
    calls = MISTRAL.parse('[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{}[TOOL_CALLS]g{}').tool_calls
    assert calls[0].id == "a1b2c3d4e"
    assert re.fullmatch(r"[A-Za-z0-9]{9}", calls[1].id)


def test_needs_special_tokens():
    assert MISTRAL.requires_special_tokens and "[TOOL_CALLS]" in MISTRAL.markers and "[ARGS]" in MISTRAL.markers
