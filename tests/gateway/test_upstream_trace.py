"""A gateway's call to a worker as a span: its context goes to the worker as `traceparent`, it is
a child of the request's span, it records the outcome, and a failed call is an error span."""

import asyncio

import httpx
import orjson
import pytest

from tandem.api.internal import wire
from tandem.gateway.upstream_trace import traced_generate
from tandem.gateway.worker_client import WorkerFailed
from tandem.tracing.traceparent import parse_traceparent
from tandem.tracing.tracer import NoopTracer
from tandem.types import EngineRequest, FinishReason, RequestDelta, SamplingParams, TraceParent
from tests.gateway.fake_workers import HttpxWorkerHTTP

PARENT = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
REQ = EngineRequest("r1-d1", [1, 2, 3], SamplingParams(max_tokens=2), resume_output_ids=[5])


class Recorded:
    def __init__(self, span, name, parent, kind, attrs):
        self.span, self.name, self.parent, self.kind = span, name, parent, kind
        self.attrs = dict(attrs or {})
        self.error = None
        self.ended = 0

    @property
    def context(self):
        return self.span.context

    def set_attributes(self, attrs):
        self.attrs.update(attrs)

    def add_event(self, name, at_ns=None, attrs=None):
        pass

    def set_error(self, message):
        self.error = message

    def rename(self, name):
        self.name = name

    def end(self):
        self.ended += 1


class RecordingTracer:
    """The no-op tracer's contexts, every span kept for the test."""
    enabled = True

    def __init__(self):
        self.spans = []

    def start_span(self, name, parent, kind, attrs=None):
        s = Recorded(NoopTracer().start_span(name, parent, kind), name, parent, kind, attrs)
        self.spans.append(s)
        return s

    def shutdown(self):
        pass


def run(handler, tracer):
    seen = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    async def go():
        http = HttpxWorkerHTTP(httpx.AsyncClient(transport=httpx.MockTransport(record)))
        try:
            return [d async for d in traced_generate(tracer, PARENT, http, "http://w1", REQ,
                                                     "decode", 5.0)]
        finally:
            await http.client.aclose()

    return asyncio.run(go()), seen


def ndjson(*deltas: RequestDelta) -> httpx.Response:
    return httpx.Response(200, content=b"".join(orjson.dumps(wire.delta_to_dict(d)) + b"\n"
                                                for d in deltas))


def test_the_worker_gets_the_calls_span_as_its_parent():
    tracer = RecordingTracer()
    deltas, seen = run(lambda r: ndjson(
        RequestDelta("r1-d1", [7], "a"),
        RequestDelta("r1-d1", [8], "b", finished=True, finish_reason=FinishReason.LENGTH,
                     num_cached_tokens=3)), tracer)
    assert [d.new_token_ids for d in deltas] == [[7], [8]]
    (span,) = tracer.spans
    sent = parse_traceparent(seen[0].headers["traceparent"])
    assert sent == span.context and sent.trace_id == PARENT.trace_id and sent.span_id != PARENT.span_id
    assert (span.name, span.parent, span.kind, span.ended, span.error) == \
        ("decode call", PARENT, "client", 1, None)
    assert span.attrs == {"tandem.pool": "decode", "tandem.worker.url": "http://w1",
                          "tandem.request_id": "r1-d1", "tandem.resumed_tokens": 1,
                          "tandem.finish_reason": "length", "tandem.cached_tokens": 3,
                          "tandem.output_tokens": 2}


def test_a_failed_call_is_an_error_span_ended_once():
    tracer = RecordingTracer()
    with pytest.raises(WorkerFailed):
        run(lambda r: httpx.Response(503, content=b"busy"), tracer)
    (span,) = tracer.spans
    assert span.ended == 1 and "answered 503" in span.error


def test_a_call_the_client_abandons_still_ends_its_span():
    tracer = RecordingTracer()

    async def go():
        http = HttpxWorkerHTTP(httpx.AsyncClient(transport=httpx.MockTransport(lambda r: ndjson(
            RequestDelta("r1-d1", [7], "a"), RequestDelta("r1-d1", [8], "b", finished=True,
                                                          finish_reason=FinishReason.STOP)))))
        gen = traced_generate(tracer, None, http, "http://w1", REQ, "both", 5.0)
        assert (await anext(gen)).new_token_ids == [7]
        await gen.aclose()   # the client left after the first token
        await http.client.aclose()

    asyncio.run(go())
    (span,) = tracer.spans
    assert span.ended == 1 and span.parent is None and span.attrs["tandem.output_tokens"] == 1


def test_with_nothing_recorded_the_header_still_goes_to_the_worker():
    deltas, seen = run(lambda r: ndjson(RequestDelta("r1-d1", [8], "b", finished=True,
                                                     finish_reason=FinishReason.STOP)), NoopTracer())
    assert [d.new_token_ids for d in deltas] == [[8]]
    sent = parse_traceparent(seen[0].headers["traceparent"])
    assert sent.trace_id == PARENT.trace_id and sent.span_id != PARENT.span_id
