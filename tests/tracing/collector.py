"""An OpenTelemetry collector for tests: a real HTTP server on 127.0.0.1 that takes OTLP/HTTP
protobuf at /v1/traces (what the exporters send), decodes each ExportTraceServiceRequest with
opentelemetry-proto and keeps its spans, flattened, for assertions."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {1: "internal", 2: "server", 3: "client"}


@dataclass(frozen=True)
class SeenSpan:
    service: str
    name: str
    kind: str
    trace_id: str          # hex
    span_id: str
    parent_span_id: str    # "" for a root span
    attrs: dict
    events: tuple[str, ...]
    error: str | None      # the status message of a span whose status is ERROR
    start_ns: int
    end_ns: int


def _value(v):
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


def _spans(req: ExportTraceServiceRequest) -> list[SeenSpan]:
    out = []
    for rs in req.resource_spans:
        res = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(SeenSpan(
                    service=res.get("service.name", ""), name=s.name, kind=KINDS.get(s.kind, str(s.kind)),
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                    parent_span_id=s.parent_span_id.hex(),
                    attrs={a.key: _value(a.value) for a in s.attributes},
                    events=tuple(e.name for e in s.events),
                    error=s.status.message if s.status.code == 2 else None,
                    start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano))
    return out


class Collector:
    """`with Collector() as c:` serves on c.url (give it as --otlp-endpoint) until the block ends."""

    def __init__(self) -> None:
        self.spans: list[SeenSpan] = []
        self.requests = 0
        self.bad: list[str] = []   # requests that were not OTLP protobuf at /v1/traces
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != "/v1/traces" or \
                        self.headers.get("content-type") != "application/x-protobuf":
                    with collector._lock:
                        collector.bad.append(f"{self.path} {self.headers.get('content-type')}")
                    self.send_response(404)
                    self.end_headers()
                    return
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                with collector._lock:
                    collector.requests += 1
                    collector.spans.extend(_spans(req))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def trace(self, trace_id: str) -> list[SeenSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, trace_id: str, done, timeout_s: float = 20.0) -> list[SeenSpan]:
        """The trace's spans once `done(spans)` holds; fails after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.trace(trace_id)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"trace {trace_id}: after {timeout_s} s only "
                                     f"{[(s.service, s.name) for s in spans]}")
            time.sleep(0.1)
