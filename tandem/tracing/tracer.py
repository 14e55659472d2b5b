"""The Tracer a process records spans with, and the one that records nothing.

A span knows its own context (`TraceParent`: its trace id and span id), which a caller forwards
in the `traceparent` header so that the receiver's spans become its children. Without an OTLP
endpoint the NoopTracer still gives every span a context (the parent's trace id, or a new one,
and a fresh span id), so the header is propagated and answered all the same: that costs a few
random bytes per span, and opentelemetry is never imported.
Invariant: every span started is ended exactly once by whoever started it (a `finally`).
"""

from __future__ import annotations

from typing import Protocol

from tandem.tracing.config import TracingConfig
from tandem.tracing.span import Attrs, Span, SpanKind
from tandem.tracing.traceparent import new_span_id, new_trace_id
from tandem.types import TraceParent


class Tracer(Protocol):
    enabled: bool   # False: spans are recorded nowhere (their contexts still propagate)

    def start_span(self, name: str, parent: TraceParent | None, kind: SpanKind,
                   attrs: Attrs | None = None) -> Span:
        """A span, child of `parent` (another process's span, or one of ours); None: a new trace."""

    def shutdown(self) -> None:
        """Flush what is queued, within the config's bound; later spans are dropped."""


class NoopSpan:
    __slots__ = ("context",)

    def __init__(self, context: TraceParent) -> None:
        self.context = context

    def set_attributes(self, attrs: Attrs) -> None:
        pass

    def add_event(self, name: str, at_ns: int | None = None, attrs: Attrs | None = None) -> None:
        pass

    def set_error(self, message: str) -> None:
        pass

    def rename(self, name: str) -> None:
        pass

    def end(self) -> None:
        pass


class NoopTracer:
    enabled = False

    def start_span(self, name: str, parent: TraceParent | None, kind: SpanKind,
                   attrs: Attrs | None = None) -> NoopSpan:
        if parent is None:
            return NoopSpan(TraceParent(new_trace_id(), new_span_id()))
        return NoopSpan(TraceParent(parent.trace_id, new_span_id(), parent.sampled))

    def shutdown(self) -> None:
        pass


def make_tracer(config: TracingConfig) -> Tracer:
    """The OTLP exporter's tracer when an endpoint is configured, else the no-op one."""
    if not config.enabled:
        return NoopTracer()
    from tandem.tracing.otlp import OtlpTracer   # opentelemetry only when tracing is on
    return OtlpTracer(config)
