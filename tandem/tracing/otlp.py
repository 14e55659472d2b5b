"""The Tracer over the OpenTelemetry SDK: spans batched in memory and POSTed as OTLP/HTTP
protobuf to <endpoint>/v1/traces by the SDK's BatchSpanProcessor on its own thread, so a request
never waits for the collector. Imported only when tracing is on (tandem/tracing/tracer.py).

The provider is this tracer's own, never the process-global one, and not shut down at exit by the
SDK (its atexit hook would wait 30 s for an unreachable collector): `shutdown` bounds the flush by
TracingConfig.shutdown_timeout_s. Sampling is the SDK's default, parent-based: a span whose
parent was not sampled (flags 00) is not recorded; a new trace always is.
"""

from __future__ import annotations

import threading

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import SpanKind as OtelKind

from tandem.tracing.config import TracingConfig
from tandem.tracing.span import Attrs, SpanKind
from tandem.types import TraceParent

_KINDS = {"server": OtelKind.SERVER, "client": OtelKind.CLIENT, "internal": OtelKind.INTERNAL}


class OtlpSpan:
    __slots__ = ("_span", "context")

    def __init__(self, span: OtelSpan) -> None:
        self._span = span
        sc = span.get_span_context()
        self.context = TraceParent(format(sc.trace_id, "032x"), format(sc.span_id, "016x"),
                                   sc.trace_flags.sampled)

    def set_attributes(self, attrs: Attrs) -> None:
        self._span.set_attributes(attrs)

    def add_event(self, name: str, at_ns: int | None = None, attrs: Attrs | None = None) -> None:
        self._span.add_event(name, attrs, timestamp=at_ns)

    def set_error(self, message: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, message))

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    def end(self) -> None:
        self._span.end()


class OtlpTracer:
    enabled = True

    def __init__(self, config: TracingConfig) -> None:
        self.config = config
        self._provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}),
                                        shutdown_on_exit=False)
        exporter = OTLPSpanExporter(endpoint=config.traces_url, timeout=config.export_timeout_s)
        self._provider.add_span_processor(BatchSpanProcessor(
            exporter, max_queue_size=config.max_queue_spans,
            schedule_delay_millis=config.export_interval_s * 1000,
            export_timeout_millis=config.export_timeout_s * 1000))
        self._tracer = self._provider.get_tracer("tandem")

    def start_span(self, name: str, parent: TraceParent | None, kind: SpanKind,
                   attrs: Attrs | None = None) -> OtlpSpan:
        # an explicit context, never the ambient one: a span's parent is only what it is given
        ctx = Context()
        if parent is not None:
            remote = SpanContext(int(parent.trace_id, 16), int(parent.span_id, 16), is_remote=True,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED if parent.sampled else 0))
            ctx = set_span_in_context(NonRecordingSpan(remote), ctx)
        return OtlpSpan(self._tracer.start_span(name, context=ctx, kind=_KINDS[kind],
                                                attributes=attrs))

    def shutdown(self) -> None:
        """Export what is queued, for at most shutdown_timeout_s (on a daemon thread, so an
        unreachable collector never holds the process)."""
        t = threading.Thread(target=self._provider.shutdown, name="otlp-shutdown", daemon=True)
        t.start()
        t.join(self.config.shutdown_timeout_s)
