"""The W3C Trace Context `traceparent` header (https://www.w3.org/TR/trace-context/), version 00:

    traceparent: 00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>

Parsing is lenient the way the recommendation asks: an invalid header (wrong length or version
ff, upper-case or non-hex digits, an all-zero id) is no context at all, so the receiver starts a
new trace; it is never an error for the client. A higher version is read for its first four fields
when what follows them starts with '-'. Only the sampled bit (01) of the flags is kept.
"""

from __future__ import annotations

import os

from tandem.types import TraceParent

HEADER = "traceparent"
_HEX = frozenset("0123456789abcdef")
_V00_LEN = 55   # 2 + 1 + 32 + 1 + 16 + 1 + 2


def _hex(text: str, length: int) -> bool:
    return len(text) == length and set(text) <= _HEX and text != "0" * length


def parse_traceparent(header: str | None) -> TraceParent | None:
    """The context a `traceparent` header carries; None when absent or invalid."""
    if header is None:
        return None
    h = header.strip()
    if len(h) < _V00_LEN or h[2] != "-" or h[35] != "-" or h[52] != "-":
        return None
    version, trace_id, span_id, flags = h[:2], h[3:35], h[36:52], h[53:55]
    if not (len(set(version) - _HEX) == 0 and version != "ff"):
        return None
    if version == "00" and len(h) != _V00_LEN:
        return None
    if len(h) > _V00_LEN and h[_V00_LEN] != "-":
        return None
    if not (_hex(trace_id, 32) and _hex(span_id, 16) and set(flags) <= _HEX):
        return None
    return TraceParent(trace_id, span_id, sampled=bool(int(flags, 16) & 1))


def format_traceparent(tp: TraceParent) -> str:
    return f"00-{tp.trace_id}-{tp.span_id}-{'01' if tp.sampled else '00'}"


def new_trace_id() -> str:
    """16 random bytes as 32 hex digits (all zeros has chance 2^-128 and is redrawn)."""
    while (tid := os.urandom(16).hex()) == "0" * 32:
        pass
    return tid


def new_span_id() -> str:
    while (sid := os.urandom(8).hex()) == "0" * 16:
        pass
    return sid
