"""Tracing on the command line, shared by `tandem serve`, `tandem gateway` and `tandem up` (which
forwards --otlp-endpoint to its gateway and every worker), and the one place they become a
TracingConfig (docs/tracing.md).

  --otlp-endpoint URL       export spans as OTLP/HTTP protobuf to URL/v1/traces (a collector's
                            base URL, e.g. http://otel-collector:4318); default
                            $OTEL_EXPORTER_OTLP_ENDPOINT; unset: nothing recorded or exported (the
                            traceparent header is still read, forwarded and answered)
  --otlp-service-name NAME  the spans' service.name (default tandem-gateway, tandem-prefill,
                            tandem-decode, or tandem-worker for role both)
An endpoint that is not an http(s) URL is a usage error.
"""

from __future__ import annotations

import argparse
import os

from tandem.tracing.config import TracingConfig

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"


def add_tracing_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--otlp-endpoint", default=None, metavar="URL",
                   help="OpenTelemetry collector (OTLP/HTTP, e.g. http://localhost:4318): export a "
                        "span per request, per call to a worker and per worker request to "
                        "URL/v1/traces (default $OTEL_EXPORTER_OTLP_ENDPOINT; unset: no spans, the "
                        "W3C traceparent header is still propagated)")
    p.add_argument("--otlp-service-name", default=None, metavar="NAME",
                   help="service.name of the exported spans (default tandem-gateway, or "
                        "tandem-<role> for a worker)")


def tracing_config_from_args(args: argparse.Namespace, default_service: str, verb: str) -> TracingConfig:
    endpoint = args.otlp_endpoint or os.environ.get(ENDPOINT_ENV) or None
    try:
        return TracingConfig(otlp_endpoint=endpoint,
                             service_name=args.otlp_service_name or default_service)
    except ValueError as exc:
        raise SystemExit(f"tandem {verb}: --otlp-endpoint: {exc}") from None


def forwarded_tracing_args(args: argparse.Namespace) -> tuple[str, ...]:
    """`tandem up`'s --otlp-endpoint for its gateway and workers (each keeps its own service name)."""
    return (f"--otlp-endpoint={args.otlp_endpoint}",) if args.otlp_endpoint else ()
