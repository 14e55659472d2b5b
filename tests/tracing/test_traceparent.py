"""The traceparent header: what is a context, what is ignored (a new trace, never an error)."""

import pytest

from tandem.tracing.traceparent import format_traceparent, new_span_id, new_trace_id, parse_traceparent
from tandem.types import TraceParent

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"


def test_the_recommendations_example_parses_and_formats_back():
    h = f"00-{TID}-{SID}-01"
    tp = parse_traceparent(h)
    assert tp == TraceParent(TID, SID, sampled=True)
    assert format_traceparent(tp) == h


def test_only_the_sampled_bit_of_the_flags_counts():
    assert parse_traceparent(f"00-{TID}-{SID}-00").sampled is False
    assert parse_traceparent(f"00-{TID}-{SID}-03").sampled is True
    assert parse_traceparent(f"00-{TID}-{SID}-02").sampled is False
    assert format_traceparent(TraceParent(TID, SID, sampled=False)) == f"00-{TID}-{SID}-00"


def test_surrounding_whitespace_is_ignored():
    assert parse_traceparent(f"  00-{TID}-{SID}-01 ") == TraceParent(TID, SID)


@pytest.mark.parametrize("header", [
    None, "", "garbage", f"00-{TID}-{SID}", f"00-{TID}-{SID}-1",
    f"00-{TID.upper()}-{SID}-01",             # upper case is invalid
    f"00-{'0' * 32}-{SID}-01",                # all-zero trace id
    f"00-{TID}-{'0' * 16}-01",                # all-zero parent id
    f"ff-{TID}-{SID}-01",                     # version ff is forbidden
    f"00-{TID}-{SID}-01-extra",               # version 00 has exactly four fields
    f"00_{TID}_{SID}_01",
    f"00-{TID[:-1]}g-{SID}-01",
    f"00-{TID}-{SID}-zz",
    f"0x-{TID}-{SID}-01",
    f"01-{TID}-{SID}-01extra",                # a later version's fields must end at a '-'
])
def test_an_invalid_header_is_no_context(header):
    assert parse_traceparent(header) is None


def test_a_later_version_is_read_for_its_first_four_fields():
    assert parse_traceparent(f"01-{TID}-{SID}-01-what-comes-next") == TraceParent(TID, SID)
    assert parse_traceparent(f"cc-{TID}-{SID}-00") == TraceParent(TID, SID, sampled=False)


def test_new_ids_are_valid_and_distinct():
    tids = {new_trace_id() for _ in range(100)}
    sids = {new_span_id() for _ in range(100)}
    assert len(tids) == 100 and len(sids) == 100
    for t in tids:
        for s in list(sids)[:3]:
            assert parse_traceparent(format_traceparent(TraceParent(t, s))) == TraceParent(t, s)
