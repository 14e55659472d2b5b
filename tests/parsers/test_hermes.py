import json

import pytest
from hypothesis import given, settings, strategies as st

from tandem.parsers.events import ContentDelta, ToolCall, ToolCallArguments, ToolCallStart
from tandem.parsers.hermes import HERMES
from tests.parsers.splitting import (
    CUTS, JSON_OBJECTS, LAYOUTS, assert_tools_split_invariant, check_generated_call, fixed_ids,
)

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'

# (model output, content, [(name, arguments)])
EXAMPLES = [
    (WEATHER, None, [("get_weather", '{"city": "Paris", "unit": "celsius"}')]),
    ("I'll check both.\n" + WEATHER + "\n" + WEATHER.replace("Paris", "Tokyo"), "I'll check both.\n",
     [("get_weather", '{"city": "Paris", "unit": "celsius"}'), ("get_weather", '{"city": "Tokyo", "unit": "celsius"}')]),
    # Hermes 2 Pro writes the arguments first; compact JSON is re-serialized canonically
    ('<tool_call>\n{"arguments": {"q":"a\\"b","n":[1,2.50]},"name":"search"}\n</tool_call>', None,
     [("search", '{"q": "a\\"b", "n": [1, 2.5]}')]),
    ('<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>', None, [("now", "{}")]),
    ('<tool_call>\n{"name": "now"}\n</tool_call>', None, [("now", "{}")]),
    ('<tool_call>\n{"name": "f", "arguments": "{\\"x\\": 1}"}\n</tool_call>', None, [("f", '{"x": 1}')]),
    ('<tool_call>\n{"name": "f", "arguments": null}\n</tool_call>', None, [("f", "{}")]),
    ('<tool_call>\n{"name": "write", "arguments": {"text": "</tool_call> is literal; 东京 😀"}}\n</tool_call>', None,
     [("write", '{"text": "</tool_call> is literal; 东京 😀"}')]),
    ('<tool_call>{"name": "unoffered_tool", "arguments": {"a": 1}}</tool_call>', None, [("unoffered_tool", '{"a": 1}')]),
    ("The weather is sunny.", "The weather is sunny.", []),
    ("a < b and <tool is not a tag", "a < b and <tool is not a tag", []),
    ('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\nDone.', "\nDone.", [("f", '{"a": 1}')]),
]

MALFORMED = [
    # not JSON, a JSON answer, no name, a name that is not a string: the block is content, verbatim
    ("<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", []),
    ('Sure: <tool_call>{"answer": 42}</tool_call> ok', 'Sure: <tool_call>{"answer": 42}</tool_call> ok', []),
    ('<tool_call>{"arguments": {"a": 1}}</tool_call>', '<tool_call>{"arguments": {"a": 1}}</tool_call>', []),
    ('<tool_call>{"name": 5, "arguments": {}}</tool_call>', '<tool_call>{"name": 5, "arguments": {}}</tool_call>', []),
    # cut before the call was certain: content
    ('<tool_call>\n{"name": "get_wea', '<tool_call>\n{"name": "get_wea', []),
    ("text <tool_", "text <tool_", []),
    # cut inside the arguments (max_tokens): the call stays, its arguments closed
    ('<tool_call>\n{"name": "f", "arguments": {"a": "long te', None, [("f", '{"a": "long te"}')]),
    ('<tool_call>\n{"name": "f", "arguments": {"a": [1, {"b": 2', None, [("f", '{"a": [1, {"b": 2}]}')]),
    # broken after the call started: closed there; the rest of the block is content
    ('<tool_call>\n{"name": "f", "arguments": {"a": 1 "b": 2}}\n</tool_call>', '"b": 2}}\n', [("f", '{"a": 1}')]),
    # a missing outer brace is forgiven
    ('<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>', None, [("f", '{"a": 1}')]),
]


@pytest.mark.parametrize("text, content, calls", EXAMPLES + MALFORMED)
def test_parse_exact(text, content, calls):
    result = HERMES.parse(text, new_id=fixed_ids)
    assert result.content == content
    assert [(c.name, c.arguments) for c in result.tool_calls] == calls
    assert [c.id for c in result.tool_calls] == [f"call_{i}" for i in range(len(calls))]


@pytest.mark.parametrize("text", [t for t, _, _ in EXAMPLES + MALFORMED])
@settings(derandomize=True, max_examples=25)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(text, cuts):
    assert_tools_split_invariant(HERMES, text, cuts)


@settings(derandomize=True, max_examples=60)
@given(obj=JSON_OBJECTS, layout=LAYOUTS, cuts=CUTS, order=st.booleans())
def test_generated_arguments_are_canonical(obj, layout, cuts, order):
    args = json.dumps(obj, **layout)
    body = f'{{"name": "tool", "arguments": {args}}}' if order else f'{{"arguments": {args}, "name": "tool"}}'
    check_generated_call(HERMES, f"<tool_call>\n{body}\n</tool_call>", "tool", obj, cuts)


def test_markup_never_reaches_content_and_arguments_stream_as_generated():
    s = HERMES.stream(new_id=fixed_ids)
    events = []
    for ch in "Hi<tool_call>\n" + '{"name": "f", "arguments": {"text": "' + "x" * 200 + '"}}\n</tool_call>':
        events.append(s.feed(ch))
    events.append(s.finish())
    flat = [e for batch in events for e in batch]
    assert "".join(e.text for e in flat if isinstance(e, ContentDelta)) == "Hi"
    assert [e for e in flat if isinstance(e, ToolCallStart)] == [ToolCallStart(0, "call_0", "f")]
    fragments = [e for e in flat if isinstance(e, ToolCallArguments)]
    assert len(fragments) > 100                    # streamed while generated, not at the end
    assert "".join(e.fragment for e in fragments) == json.dumps({"text": "x" * 200})


def test_long_arguments_fed_in_small_deltas_are_fast_and_exact():
    code = "def f(x):\n    return \"\\\\\" + x  # é\n" * 400          # ~16 KB of code in a string
    text = "<tool_call>\n" + json.dumps({"name": "write_file", "arguments": {"path": "a.py", "code": code}}) + "\n</tool_call>"
    s = HERMES.stream(new_id=fixed_ids)
    fragments = []
    for i in range(0, len(text), 3):
        fragments += [e.fragment for e in s.feed(text[i:i + 3]) if isinstance(e, ToolCallArguments)]
    fragments += [e.fragment for e in s.finish() if isinstance(e, ToolCallArguments)]
    assert "".join(fragments) == json.dumps({"path": "a.py", "code": code}, ensure_ascii=False)


def test_ids_come_from_the_factory_and_default_to_random():
    assert HERMES.parse(WEATHER, new_id=lambda i: f"req7-{i}").tool_calls[0].id == "req7-0"
    assert HERMES.parse(WEATHER).tool_calls[0].id.startswith("call_")


def test_tool_call_type():
    assert HERMES.parse(WEATHER, new_id=fixed_ids).tool_calls == [
        ToolCall("call_0", "get_weather", '{"city": "Paris", "unit": "celsius"}')]
