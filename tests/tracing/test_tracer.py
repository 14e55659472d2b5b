"""The tracers: the no-op one propagates contexts and records nothing; the OTLP one exports to a
real collector on loopback, parents and all, and its shutdown is bounded when nobody answers."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tandem.tracing.config import TracingConfig
from tandem.tracing.tracer import NoopTracer, make_tracer
from tandem.types import TraceParent
from tests.tracing.collector import Collector

PARENT = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def test_without_an_endpoint_the_tracer_is_the_no_op_one():
    assert isinstance(make_tracer(TracingConfig()), NoopTracer)


def test_a_no_op_span_continues_its_parents_trace_with_a_new_span_id():
    t = NoopTracer()
    child = t.start_span("x", PARENT, "server").context
    assert child.trace_id == PARENT.trace_id and child.span_id != PARENT.span_id
    unsampled = TraceParent(PARENT.trace_id, PARENT.span_id, sampled=False)
    assert t.start_span("x", unsampled, "server").context.sampled is False
    a, b = t.start_span("x", None, "server").context, t.start_span("x", None, "server").context
    assert a.trace_id != b.trace_id and a.sampled


@pytest.mark.parametrize("bad", ["localhost:4318", "grpc://collector:4317", "http://", ""])
def test_an_endpoint_that_is_not_an_http_url_is_refused(bad):
    with pytest.raises(ValueError, match="http"):
        TracingConfig(otlp_endpoint=bad)


def test_spans_go_to_the_endpoints_v1_traces():
    assert TracingConfig(otlp_endpoint="http://c:4318").traces_url == "http://c:4318/v1/traces"
    assert TracingConfig(otlp_endpoint="http://c:4318/").traces_url == "http://c:4318/v1/traces"
    assert TracingConfig(otlp_endpoint="http://c/v1/traces").traces_url == "http://c/v1/traces"


def test_spans_reach_a_collector_with_parents_attributes_events_and_errors():
    with Collector() as c:
        tracer = make_tracer(TracingConfig(otlp_endpoint=c.url, service_name="svc-test",
                                           export_interval_s=0.2))
        server = tracer.start_span("GET /x", PARENT, "server", {"a": 1})
        client = tracer.start_span("decode call", server.context, "client")
        client.add_event("first_token", time.time_ns())
        client.set_error("worker gone")
        client.end()
        server.set_attributes({"b": "two", "ok": True})
        server.end()
        tracer.shutdown()
        spans = {s.name: s for s in c.trace(PARENT.trace_id)}
    assert set(spans) == {"GET /x", "decode call"}
    s, k = spans["GET /x"], spans["decode call"]
    assert (s.service, s.kind, s.parent_span_id, s.span_id) == ("svc-test", "server", PARENT.span_id,
                                                                server.context.span_id)
    assert s.attrs == {"a": 1, "b": "two", "ok": True} and s.error is None
    assert (k.kind, k.parent_span_id, k.events, k.error) == ("client", s.span_id, ("first_token",),
                                                             "worker gone")
    assert c.bad == []


def test_an_unsampled_parent_records_nothing():
    with Collector() as c:
        tracer = make_tracer(TracingConfig(otlp_endpoint=c.url, export_interval_s=0.2))
        unsampled = TraceParent(PARENT.trace_id, PARENT.span_id, sampled=False)
        span = tracer.start_span("x", unsampled, "server")
        assert span.context.sampled is False and span.context.trace_id == PARENT.trace_id
        span.end()
        tracer.shutdown()
        assert c.trace(PARENT.trace_id) == []


def test_shutdown_is_bounded_when_the_collector_never_answers():
    # a listener that accepts connections and never answers: each export waits its timeout
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        tracer = make_tracer(TracingConfig(otlp_endpoint=url, export_timeout_s=30.0,
                                           shutdown_timeout_s=1.0))
        for i in range(10):
            tracer.start_span(f"s{i}", None, "server").end()
        t0 = time.monotonic()
        tracer.shutdown()
        assert time.monotonic() - t0 < 3.0


def test_without_an_endpoint_no_process_imports_opentelemetry():
    """A worker's and a gateway's app built and serving a traced request, with tracing off: not
    one opentelemetry module loaded (the tracer is the no-op one; the header still answers)."""
    code = """
import sys, torch
torch.set_num_threads(1)
from starlette.testclient import TestClient
import tandem.cli.serve, tandem.cli.gateway, tandem.cli.up, tandem.worker.process, tandem.gateway.app
from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tests.api.fakes import FakeBackend
tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
with TestClient(build_app(FakeBackend(), ServerConfig())) as c:
    r = c.post("/v1/completions", json={"model": "fake-model", "prompt": "hi", "max_tokens": 2},
               headers={"traceparent": tp})
    assert r.status_code == 200, r.text
    assert r.headers["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-"), r.headers
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
