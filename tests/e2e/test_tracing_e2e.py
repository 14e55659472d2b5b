"""Tracing end to end: a gateway, a prefill and a decode worker (real processes, tiny model), each
started with --otlp-endpoint pointing at a real OTLP/HTTP collector on loopback
(tests/tracing/collector.py). A client's traceparent reaches every process: the spans of all
three share the client's trace id and nest as client -> gateway request -> worker call -> worker
request; a request without a header, or with an invalid one, is served (200) in a new trace.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tandem.tracing.traceparent import parse_traceparent
from tests.e2e.test_gateway_e2e import PROMPT, assert_no_blocks_held, build, complete, running, url
from tests.tracing.collector import Collector

pytestmark = pytest.mark.timeout(300)

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TID}-{CLIENT_SPAN}-01"
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def traced(llama_dir):
    with Collector() as collector:
        otlp = ("--otlp-endpoint", collector.url)
        c = build(str(llama_dir), ["prefill", "decode"],
                  {"g": ([0, 1], "round_robin", ("--prefill-placement", "remote", *otlp))},
                  worker_args=otlp)
        with running(c):
            yield c, collector


def _complete_trace(spans) -> bool:
    services = {s.service for s in spans}
    return {"tandem-gateway", "tandem-prefill", "tandem-decode"} <= services and len(spans) >= 5


def _check_tree(c, spans, client_span: str) -> None:
    """The five spans of one PD request, their parents and what each says."""
    by = {(s.service, s.name): s for s in spans}
    assert len(by) == len(spans) == 5, [(s.service, s.name) for s in spans]
    gw = by["tandem-gateway", "POST /v1/completions"]
    p_call, d_call = by["tandem-gateway", "prefill call"], by["tandem-gateway", "decode call"]
    p_work = by["tandem-prefill", "POST /internal/generate"]
    d_work = by["tandem-decode", "POST /internal/generate"]
    # the tree: client -> gateway request -> one call per worker -> that worker's request
    assert gw.parent_span_id == client_span and gw.kind == "server"
    assert p_call.parent_span_id == d_call.parent_span_id == gw.span_id
    assert p_call.kind == d_call.kind == "client"
    assert p_work.parent_span_id == p_call.span_id and d_work.parent_span_id == d_call.span_id
    assert p_work.kind == d_work.kind == "server"
    # the gateway's request: route, model, the workers chosen, status
    assert gw.attrs["http.route"] == "/v1/completions" and gw.attrs["http.response.status_code"] == 200
    assert gw.attrs["tandem.model"] == "m"
    assert gw.attrs["tandem.worker.prefill"] == url(c, "w0") == p_call.attrs["tandem.worker.url"]
    assert gw.attrs["tandem.worker.decode"] == url(c, "w1") == d_call.attrs["tandem.worker.url"]
    # the workers' requests: tokens, finish reason, the engine's timing
    assert p_work.attrs["tandem.prefill_only"] is True and p_work.attrs["gen_ai.usage.output_tokens"] == 1
    assert p_work.attrs["gen_ai.usage.input_tokens"] > 10
    assert d_work.attrs["tandem.kv_handle"] is True
    assert d_work.attrs["gen_ai.usage.output_tokens"] == MAX_TOKENS
    assert d_work.attrs["tandem.finish_reason"] == "length"
    assert d_work.attrs["gen_ai.usage.input_tokens"] == p_work.attrs["gen_ai.usage.input_tokens"]
    assert "tandem.cached_tokens" in d_work.attrs
    for w in (p_work, d_work):
        assert w.events == ("queued", "scheduled", "first_token") and w.error is None
    assert d_call.attrs["tandem.output_tokens"] == MAX_TOKENS - 1   # the first came from prefill
    # nesting in time (clocks of one host): each child starts within its parent; a worker's span
    # ends once its body's last chunk is out, which may be just after the gateway read the last line
    for parent, child in ((gw, p_call), (gw, d_call), (p_call, p_work), (d_call, d_work)):
        assert parent.start_ns <= child.start_ns <= parent.end_ns
        assert child.end_ns <= parent.end_ns + 250_000_000


def test_a_clients_traceparent_reaches_gateway_prefill_and_decode(traced):
    c, collector = traced
    headers, chunks, usage = stream_chunks_with(url(c, "g"), {"traceparent": TRACEPARENT})
    assert usage["completion_tokens"] == MAX_TOKENS
    answered = parse_traceparent(headers["traceparent"])
    assert answered.trace_id == TID
    spans = collector.wait_for(TID, _complete_trace)
    _check_tree(c, spans, CLIENT_SPAN)
    gw = next(s for s in spans if s.name == "POST /v1/completions")
    assert answered.span_id == gw.span_id   # the answer names the gateway's span
    assert collector.bad == []
    assert_no_blocks_held(c)


@pytest.mark.parametrize("header", [None, "00-not-a-trace-01", f"00-{'0' * 32}-{CLIENT_SPAN}-01"])
def test_without_a_valid_traceparent_a_request_gets_a_new_trace(traced, header):
    c, collector = traced
    r = complete(url(c, "g"), PROMPT, MAX_TOKENS, headers={"traceparent": header} if header else None)
    assert r.status_code == 200
    answered = parse_traceparent(r.headers["traceparent"])
    assert answered is not None and answered.trace_id != TID
    spans = collector.wait_for(answered.trace_id, _complete_trace)
    _check_tree(c, spans, "")   # the gateway's span is the trace's root


def stream_chunks_with(base: str, headers: dict):
    """test_gateway_e2e's stream_chunks, with request headers."""
    body = {"model": "m", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    usage, chunks = None, []
    with httpx.stream("POST", base + "/v1/completions", json=body, headers=headers, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                usage = event.get("usage") or usage
                chunks += [ch["text"] for ch in event.get("choices", []) if ch.get("text")]
        return r.headers, chunks, usage
