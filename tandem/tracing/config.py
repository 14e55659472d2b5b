"""TracingConfig: whether and where a process exports its spans. Built by the CLI
(tandem/cli/tracing_flags.py); nothing here reads the environment."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class TracingConfig:
    # the collector's OTLP/HTTP base URL (e.g. http://otel-collector:4318); spans go to
    # <endpoint>/v1/traces as protobuf. None: no spans are recorded or exported (the
    # traceparent header is still read, forwarded and answered).
    otlp_endpoint: str | None = None
    service_name: str = "tandem"   # the resource's service.name, e.g. tandem-gateway, tandem-prefill
    # a batch of spans goes out at least this often; spans wait in a bounded queue in between
    # (past max_queue_spans the oldest are dropped: tracing never slows a request down)
    export_interval_s: float = 1.0
    max_queue_spans: int = 4096
    export_timeout_s: float = 5.0  # one export call, its retries included
    # at shutdown the queued spans are flushed for at most this long, then dropped
    shutdown_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.otlp_endpoint is not None:
            u = urlsplit(self.otlp_endpoint)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise ValueError(f"the OTLP endpoint must be an http(s) URL such as "
                                 f"http://localhost:4318, got {self.otlp_endpoint!r}")

    @property
    def enabled(self) -> bool:
        return self.otlp_endpoint is not None

    @property
    def traces_url(self) -> str:
        """Where spans are POSTed: the endpoint + /v1/traces, unless it already names that path."""
        assert self.otlp_endpoint is not None
        base = self.otlp_endpoint.rstrip("/")
        return base if base.endswith(TRACES_PATH) else base + TRACES_PATH
