"""The W3C Trace Context `traceparent` header (https://www.w3.org/TR/trace-context/), version 00:

    traceparent: 00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>

Parsing is lenient the way the recommendation asks: an invalid header (wrong length or version
ff, upper-case or non-hex digits, an all-zero id) is no context at all, so the receiver starts a
new trace; it is never an error for the client. A higher version is read for its first four fields
when what follows them starts with '-'. Only the sampled bit (01) of the flags is kept.
"""

from __future__ import annotations

import os
import re

from tandem.types import TraceParent

HEADER = "traceparent"
# version, trace id, parent span id, flags, and what a later version may add after a '-'
_FORMAT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


def parse_traceparent(header: str | None) -> TraceParent | None:
    """The context a `traceparent` header carries; None when absent or invalid."""
    if header is None:
        return None
    m = _FORMAT.fullmatch(header.strip())
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest is not None) \
            or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
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
