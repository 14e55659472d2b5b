"""What a span is to the code that records it: its own context, attributes, events, an error
status, its end. Implemented by tandem/tracing/tracer.py's NoopSpan and tandem/tracing/otlp.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

from tandem.types import TraceParent

SpanKind = Literal["server", "client", "internal"]
AttrValue = str | int | float | bool
Attrs = Mapping[str, AttrValue]


class Span(Protocol):
    @property
    def context(self) -> TraceParent: ...

    def set_attributes(self, attrs: Attrs) -> None: ...

    def add_event(self, name: str, at_ns: int | None = None, attrs: Attrs | None = None) -> None:
        """`at_ns`: wall-clock time in ns since the epoch (time.time_ns()); None: now."""

    def set_error(self, message: str) -> None: ...

    def rename(self, name: str) -> None:
        """A better name found once the span runs (a server span's route template)."""

    def end(self) -> None: ...
