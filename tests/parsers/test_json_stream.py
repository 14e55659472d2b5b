import json

import pytest
from hypothesis import given, settings, strategies as st

from tandem.parsers.json_stream import JsonValueStream, canonical, loads_finite
from tests.parsers.splitting import CUTS, JSON_OBJECTS, JSON_VALUES, LAYOUTS, pieces

def stream(parts, final=True):
    s, buf, pos, out = JsonValueStream(), "", 0, []
    for p in parts:
        buf += p
        pos = s.advance(buf, pos, False)
        out.append(s.take())
    if final:
        pos = s.advance(buf, pos, True)
        out.append(s.take())
    return "".join(out), s, pos


@settings(derandomize=True, max_examples=150)
@given(value=JSON_VALUES, layout=LAYOUTS, cuts=CUTS)
def test_streamed_output_is_the_canonical_dump_for_any_split(value, layout, cuts):
    raw = json.dumps(value, **layout)
    out, s, pos = stream(pieces(raw, cuts))
    assert s.status == "done" and pos == len(raw)
    assert out == canonical(json.loads(raw))


@settings(derandomize=True, max_examples=100)
@given(value=JSON_OBJECTS, layout=LAYOUTS, cut=st.integers(0, 1 << 16))
def test_every_prefix_written_plus_repair_is_valid_json(value, layout, cut):
    raw = json.dumps(value, **layout)
    prefix = raw[:cut % (len(raw) + 1)]
    out, s, _ = stream([prefix], final=False)
    assert canonical(json.loads(raw)).startswith(out)     # written text never has to be taken back
    if out:
        json.loads(out + s.repair())                      # and closes into valid JSON


def test_value_ends_where_the_json_ends():
    out, s, pos = stream(['{"a": [1, 2.50, -0, 1E2]}  </tool_call>'])
    assert (out, s.status, pos) == ('{"a": [1, 2.5, 0, 100.0]}', "done", 25)
    out, s, pos = stream(["12}"])
    assert (out, s.status, pos) == ("12", "done", 2)


def test_surrogate_pairs_and_lone_surrogates():
    assert stream([r'"\ud83d', r'\ude00"'])[0] == '"😀"'
    out = stream([r'"\ud800x"'])[0]
    assert out == '"\\ud800x"'
    out.encode("utf-8")                       # a lone surrogate stays escaped: encodable


def test_raw_control_characters_are_accepted_and_escaped():
    assert stream(['{"code": "a\nb\tc"}'])[0] == '{"code": "a\\nb\\tc"}'


@pytest.mark.parametrize("raw, written, at", [
    ('{"a": }', "{", 6), ('{"a": 1,}', '{"a": 1', 8), ('{"a": [1, x', '{"a": [1', 10),
    ("NaN", "", 0), ("1e400", "", 0), ('{"a": 12abc}', "{", 6), ('{"a": "\\x"}', '{"a": "', 8), ("{'a': 1}", "{", 1),
])
def test_errors_stop_at_the_offending_character(raw, written, at):
    out, s, pos = stream([raw])
    assert (out, s.status, pos) == (written, "error", at)
    if written:
        json.loads(out + s.repair())


def test_truncated_value_repairs_to_valid_json():
    out, s, _ = stream(['{"a": {"b": ["x", "unterminated'])
    assert s.status == "more"
    assert out + s.repair() == '{"a": {"b": ["x", "unterminated"]}}'


def test_loads_finite_rejects_non_json_numbers():
    for bad in ("NaN", "[Infinity]", "-Infinity", "1e999"):
        with pytest.raises(ValueError):
            loads_finite(bad)
    assert loads_finite('{"a": "x\ny"}') == {"a": "x\ny"}
