import json

import pytest
from hypothesis import assume, given, settings, strategies as st

from tandem.parsers.events import ToolCallArguments
from tandem.parsers.qwen3_coder import QWEN3_CODER
from tests.parsers.splitting import CUTS, JSON_VALUES, assert_tools_split_invariant, fixed_ids

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
    "metric": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"},
    "note": {"type": ["string", "null"]}, "mode": {"enum": ["fast", "slow"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": SCHEMA}}]


def call(name: str, params: list[tuple[str, str]]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


EXAMPLES = [
    (call("get_weather", [("city", "Paris"), ("days", "3"), ("temp", "21.5"), ("metric", "True"),
                          ("opts", '{"a": [1, 2]}'), ("tags", "['x', 'y']"), ("note", "null"), ("mode", "fast")]),
     None, [("get_weather", '{"city": "Paris", "days": 3, "temp": 21.5, "metric": true, "opts": {"a": [1, 2]}, '
                            '"tags": ["x", "y"], "note": null, "mode": "fast"}')]),
    ("I'll look it up.\n" + call("get_weather", [("city", "New York\nNY"), ("days", "three")]), "I'll look it up.\n",
     [("get_weather", '{"city": "New York\\nNY", "days": "three"}')]),
    # a tool that was not offered: JSON-looking values are JSON, the rest strings
    (call("run", [("n", "42"), ("flags", '["-v"]'), ("cmd", 'ls "a b"'), ("maybe", "nothing")]), None,
     [("run", '{"n": 42, "flags": ["-v"], "cmd": "ls \\"a b\\"", "maybe": "nothing"}')]),
    (call("get_weather", []), None, [("get_weather", "{}")]),
    (call("a", [("x", "1")]) + "\n" + call("b", [("y", "2")]), None, [("a", '{"x": 1}'), ("b", '{"y": 2}')]),
    ("<function=bare>\n<parameter=q>\nhi\n</parameter>\n</function>", None, [("bare", '{"q": "hi"}')]),
    # missing </parameter>: the value ends at the next tag
    ("<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n<parameter=days>\n2\n</function>\n</tool_call>", None,
     [("get_weather", '{"city": "Rome", "days": 2}')]),
    ("No call here.", "No call here.", []),
    ("<tool_call>\nplain words\n</tool_call>", "<tool_call>\nplain words\n</tool_call>", []),
    ("<tool_call>\n<function=get_weather>\n<parameter=city>\nLong tex", None, [("get_weather", '{"city": "Long tex"}')]),
    ("<tool_call>\n<function=get_wea", "<tool_call>\n<function=get_wea", []),
    ("<tool_call>\n<function=get_weather>\n<parameter=days>\n1\n</parameter>\noops\n</function>\n</tool_call>",
     "oops\n</function>\n", [("get_weather", '{"days": 1}')]),
]


@pytest.mark.parametrize("text, content, calls", EXAMPLES)
def test_parse_exact(text, content, calls):
    result = QWEN3_CODER.parse(text, TOOLS, new_id=fixed_ids)
    assert result.content == content
    assert [(c.name, c.arguments) for c in result.tool_calls] == calls


@pytest.mark.parametrize("text", [t for t, _, _ in EXAMPLES])
@settings(derandomize=True, max_examples=25)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(text, cuts):
    assert_tools_split_invariant(QWEN3_CODER, text, cuts, TOOLS)


_TAGS = ("</parameter>", "<parameter=", "</function>", "</tool_call>")
_STRINGS = st.text(max_size=30).filter(lambda s: s.lower() != "null" and not any(t in s for t in _TAGS))
_TYPED = st.one_of(
    st.tuples(st.just("string"), _STRINGS),
    st.tuples(st.just("integer"), st.integers(-10**9, 10**9)),
    st.tuples(st.just("number"), st.floats(allow_nan=False, allow_infinity=False)),
    st.tuples(st.just("boolean"), st.booleans()),
    st.tuples(st.just("object"), st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=3)),
)


@settings(derandomize=True, max_examples=60)
@given(params=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _TYPED, max_size=5), cuts=CUTS)
def test_generated_values_are_typed_by_the_schema(params, cuts):
    schema = {"type": "object", "properties": {k: {"type": t} for k, (t, _) in params.items()}}
    tools = [{"type": "function", "function": {"name": "tool", "parameters": schema}}]
    rendered, expected = [], {}
    for k, (t, v) in params.items():
        text = v if t == "string" else json.dumps(v) if t in ("object", "number") else str(v)
        assume(not any(tag in text for tag in _TAGS))       # the XML format cannot carry its own tags
        rendered.append((k, text))
        expected[k] = int(v) if t == "number" and float(v).is_integer() else v
    result = assert_tools_split_invariant(QWEN3_CODER, call("tool", rendered), cuts, tools)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("tool", json.dumps(expected, ensure_ascii=False))]


def test_string_values_stream_before_they_end():
    s = QWEN3_CODER.stream(TOOLS, fixed_ids)
    head = "<tool_call>\n<function=get_weather>\n<parameter=city>\n"
    sent = [e.fragment for e in s.feed(head) + s.feed("Paris is lovely") if isinstance(e, ToolCallArguments)]
    assert "".join(sent) == '{"city": "Paris is lovely'
    sent += [e.fragment for e in s.feed("\n</parameter>\n<parameter=days>\n1") if isinstance(e, ToolCallArguments)]
    assert "".join(sent) == '{"city": "Paris is lovely"'          # the integer waits for its end
    sent += [e.fragment for e in s.feed("0\n</parameter>\n</function>") + s.finish() if isinstance(e, ToolCallArguments)]
    assert "".join(sent) == '{"city": "Paris is lovely", "days": 10}'
