"""Helpers for the split-invariance tests: feed a text to a stream in pieces, hypothesis strategies
for where to cut and for JSON arguments, and a check that one call's arguments are canonical."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from tandem.parsers.events import ContentDelta, ReasoningDelta, ToolCallArguments, ToolCallStart, collect

# cut points are drawn large and folded onto the text, so one strategy serves every text length
CUTS = st.lists(st.integers(min_value=0, max_value=1 << 16), max_size=24)


# JSON values with the awkward parts: escapes, quotes, unicode (astral too), nesting, floats
_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | \
    st.sampled_from(['"', "\\", "\n", "\u00e9", "😀", "</tool_call>", "a\"b\\c", "\x07"])
_SCALARS = st.none() | st.booleans() | st.integers(-10**12, 10**12) | \
    st.floats(allow_nan=False, allow_infinity=False, width=64) | _TEXT
JSON_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=12)
JSON_OBJECTS = st.dictionaries(_TEXT, JSON_VALUES, max_size=5)
# how a model might lay the same value out
LAYOUTS = st.sampled_from([dict(), dict(ensure_ascii=False), dict(indent=2), dict(separators=(",", ":")),
                           dict(indent=1, ensure_ascii=False, separators=(" ,", " : "))])


def pieces(text: str, cuts: list[int]) -> list[str]:
    at = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0] + at + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def run_stream(stream, parts: list[str]) -> list:
    events = []
    for p in parts:
        events += stream.feed(p)
    events += stream.finish()
    return events


def check_well_formed(events: list) -> None:
    """Starts come in index order before their fragments; no empty text or fragment."""
    started = 0
    for ev in events:
        if isinstance(ev, ToolCallStart):
            assert ev.index == started
            started += 1
        elif isinstance(ev, ToolCallArguments):
            assert ev.index < started and ev.fragment
        else:
            assert isinstance(ev, (ContentDelta, ReasoningDelta)) and ev.text


def assert_split_invariant(make_stream, text: str, cuts: list[int], expected) -> None:
    """`make_stream()` fed `text` cut at `cuts` reassembles to `expected` (a ParsedOutput)."""
    events = run_stream(make_stream(), pieces(text, cuts))
    check_well_formed(events)
    assert collect(events) == expected


def fixed_ids(index: int) -> str:
    return f"call_{index}"


def assert_tools_split_invariant(parser, text: str, cuts: list[int], tools=None):
    """A tool parser's stream fed `text` cut at `cuts` reassembles to parse(text); returns parse(text)."""
    expected = parser.parse(text, tools, new_id=fixed_ids)
    events = run_stream(parser.stream(tools, fixed_ids), pieces(text, cuts))
    check_well_formed(events)
    got = collect(events)
    assert got.reasoning is None
    assert (got.content, got.tool_calls) == (expected.content, expected.tool_calls)
    return expected


def check_generated_call(parser, text: str, name: str, obj: dict, cuts: list[int], tools=None) -> None:
    """`text` holds one call of `name` with arguments `obj` and nothing else: the call comes back with
    the canonical arguments, whatever the split."""
    result = assert_tools_split_invariant(parser, text, cuts, tools)
    assert result.content is None
    assert [(c.name, c.arguments) for c in result.tool_calls] == [(name, json.dumps(obj, ensure_ascii=False))]
