"""Distributed tracing: the W3C `traceparent` header and spans exported over OTLP (docs/tracing.md).

`traceparent.py` parses and formats the header; `config.py` holds the frozen TracingConfig;
`tracer.py` the Tracer a process uses (a no-op one unless an OTLP endpoint is configured, which
costs a few random bytes per span and never imports opentelemetry); `otlp.py` the OpenTelemetry
SDK behind it, imported only when tracing is on.
"""
