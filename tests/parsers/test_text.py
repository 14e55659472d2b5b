from hypothesis import given, settings, strategies as st

from tandem.parsers.events import ContentDelta
from tandem.parsers.text import MarkerScanner, SegmentWriter, held_suffix
from tests.parsers.splitting import CUTS, pieces


def test_held_suffix_is_the_longest_marker_prefix_at_the_end():
    assert held_suffix("abc <tool_", ["<tool_call>"]) == 6
    assert held_suffix("abc <", ["<tool_call>", "</tool_call>"]) == 1
    assert held_suffix("abc </", ["<tool_call>", "</tool_call>"]) == 2
    assert held_suffix("abc", ["<tool_call>"]) == 0
    assert held_suffix("<tool_call>", ["<tool_call>"]) == 0   # a whole marker is found, not held


def test_scanner_finds_leftmost_and_longest():
    s = MarkerScanner(["<a>", "<a>b", "<c>"])
    assert s.search("x<c>y<a>b", 0) == (1, "<c>")
    assert s.search("x<a>b", 0) == (1, "<a>b")
    assert s.search("xyz", 0) is None


def _write(parts, strip):
    out = []
    w = SegmentWriter(out, ContentDelta, strip=strip)
    for p in parts:
        w.write(p)
    w.end_segment()
    return "".join(e.text for e in out)


def test_whitespace_only_segments_are_dropped_others_kept_verbatim():
    assert _write([" \n", "\t"], strip=False) == ""
    assert _write(["\n", " hi\n", "\n"], strip=False) == "\n hi\n\n"
    assert _write(["\n  ", "hi  there ", "\n"], strip=True) == "hi  there"


@settings(derandomize=True, max_examples=60)
@given(text=st.text(alphabet=" \nab", max_size=30), cuts=CUTS, strip=st.booleans())
def test_segment_writer_is_split_invariant(text, cuts, strip):
    expected = (text.strip() if strip else text) if text.strip() else ""
    assert _write(pieces(text, cuts), strip) == expected
