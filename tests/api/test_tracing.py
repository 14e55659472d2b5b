"""The app's side of tracing (tandem/api/tracing.py): the traceparent header in and out, the
request's context handed to the backend, and the server span a collector receives."""

import time

from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.tracing import record_final
from tandem.tracing.config import TracingConfig
from tandem.tracing.traceparent import parse_traceparent
from tandem.types import FinishReason, RequestDelta, RequestTimings
from tests.api.fakes import FakeBackend
from tests.tracing.collector import Collector

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT = f"00-{TID}-00f067aa0ba902b7-01"


def complete(client, headers=None):
    return client.post("/v1/completions", headers=headers,
                       json={"model": "fake-model", "prompt": "hi", "max_tokens": 2})


def test_the_answer_names_the_clients_trace_and_the_servers_span(client, backend):
    r = complete(client, {"traceparent": CLIENT})
    assert r.status_code == 200
    answered = parse_traceparent(r.headers["traceparent"])
    assert answered.trace_id == TID and answered.span_id != "00f067aa0ba902b7"
    # the backend's requests are children of that span (the gateway's worker calls name it)
    assert backend.seen[-1].context.trace == answered


def test_an_invalid_or_missing_traceparent_starts_a_new_trace(client, backend):
    ids = set()
    for headers in ({"traceparent": "00-nonsense"}, {"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01"},
                    None):
        r = complete(client, headers)
        assert r.status_code == 200
        answered = parse_traceparent(r.headers["traceparent"])
        assert answered is not None and answered.trace_id != TID
        ids.add(answered.trace_id)
    assert len(ids) == 3


def test_errors_are_answered_with_the_trace_too(client):
    r = client.post("/v1/completions", headers={"traceparent": CLIENT}, json={"prompt": 5})
    assert r.status_code == 400 and parse_traceparent(r.headers["traceparent"]).trace_id == TID


def test_probes_are_not_traced(client):
    for path in ("/health", "/livez", "/metrics", "/internal/stats"):
        assert "traceparent" not in client.get(path, headers={"traceparent": CLIENT}).headers


def test_the_server_span_reaches_the_collector():
    with Collector() as c:
        config = ServerConfig(tracing=TracingConfig(otlp_endpoint=c.url, service_name="tandem-test",
                                                    export_interval_s=0.2))
        with TestClient(build_app(FakeBackend(), config)) as client:
            assert complete(client, {"traceparent": CLIENT}).status_code == 200
            assert client.get("/health").status_code == 200
        # the app's shutdown flushed the span
        spans = c.trace(TID)
    assert len(spans) == 1, spans
    s = spans[0]
    assert (s.service, s.kind, s.parent_span_id) == ("tandem-test", "server", "00f067aa0ba902b7")
    assert s.attrs["http.route"] == "/v1/completions" and s.attrs["http.response.status_code"] == 200
    assert s.attrs["tandem.model"] == "fake-model" and s.error is None
    assert len(c.spans) == 1   # /health made none


def test_a_final_delta_gives_the_workers_span_its_counts_events_and_error():
    class Span:
        def __init__(self):
            self.attrs, self.events, self.error = {}, [], None

        def set_attributes(self, a):
            self.attrs.update(a)

        def add_event(self, name, at_ns=None, attrs=None):
            self.events.append((name, at_ns))

        def set_error(self, message):
            self.error = message

    now = time.monotonic()
    span = Span()
    record_final(span, RequestDelta("r", [1], "x", finished=True, finish_reason=FinishReason.LENGTH,
                                    num_prompt_tokens=9, num_cached_tokens=4, num_output_tokens=3,
                                    timings=RequestTimings(now - 0.3, now - 0.2, None, now)))
    assert span.attrs == {"gen_ai.usage.input_tokens": 9, "gen_ai.usage.output_tokens": 3,
                          "tandem.cached_tokens": 4, "tandem.finish_reason": "length"}
    (q, q_ns), (s, s_ns) = span.events   # no first token: no event for it
    assert (q, s) == ("queued", "scheduled") and 90e6 < s_ns - q_ns < 110e6
    assert abs(q_ns - (time.time_ns() - 0.3e9)) < 0.2e9 and span.error is None
    failed = Span()
    record_final(failed, RequestDelta("r", [], "", finished=True, finish_reason=FinishReason.ERROR,
                                      error="engine died"))
    assert failed.error == "engine died" and failed.events == []


def test_a_span_is_named_after_its_routes_template_not_the_id_in_the_path():
    with Collector() as c:
        config = ServerConfig(tracing=TracingConfig(otlp_endpoint=c.url, export_interval_s=0.2))
        with TestClient(build_app(FakeBackend(), config)) as client:
            r = client.get("/v1/models/no-such-model", headers={"traceparent": CLIENT})
            assert r.status_code == 404
        (s,) = c.trace(TID)
    assert s.name == "GET /v1/models/{model:path}" and s.attrs["http.route"] == "/v1/models/{model:path}"
    assert s.attrs["url.path"] == "/v1/models/no-such-model" and s.error is None   # a 4xx is no error
