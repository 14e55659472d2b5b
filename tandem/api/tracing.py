"""Tracing of the app's requests (docs/tracing.md): one server span per HTTP request that does
work, a child of the request's `traceparent` header when it carries a valid one (an invalid or
absent header starts a new trace, never an error).

TraceMiddleware (installed by tandem.api.app.build_app) starts the span before the route runs and
ends it once the response's last byte is sent (a stream's included); it answers the span's own
context in the response's `traceparent` header, so a client learns its request's trace id (and
the span to look for) on every answer, errors included. The span is in the ASGI scope for the
route: `trace_of` puts its context into the RequestContext (tandem/api/request_context.py), which
the gateway's calls to workers name as their parent; `span_of` lets a route add what it knows
(tokens, finish reason: `record_final`).
Not traced (no span, no header): health, metrics and version probes and the cluster's own
bookkeeping under /internal (stats and KV event polls, registration, role switches), which run
every second or so and carry no client request.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tandem.tracing.traceparent import HEADER, format_traceparent, parse_traceparent
from tandem.tracing.span import Span
from tandem.tracing.tracer import Tracer
from tandem.types import FinishReason, RequestDelta, TraceParent

_SPAN = "tandem.span"   # scope key: this request's server span
_HEADER = HEADER.encode()
_TRACED_INTERNAL = ("/internal/generate", "/internal/kv_release")
_UNTRACED = ("/health", "/livez", "/metrics", "/version")
# response headers the gateway sets (tandem/gateway/pd_flow.py) that name the workers it chose
_WORKER_HEADERS = {b"x-tandem-prefill": "tandem.worker.prefill",
                   b"x-tandem-decode": "tandem.worker.decode"}


def traced_path(path: str) -> bool:
    if path.startswith("/internal/"):
        return path in _TRACED_INTERNAL
    return path not in _UNTRACED


def span_of(scope: Scope) -> Span | None:
    return scope.get(_SPAN)


def trace_of(scope: Scope) -> TraceParent | None:
    span = span_of(scope)
    return None if span is None else span.context


class TraceMiddleware:
    """`model_name()`: the served model's name, on every span (read per request: a worker knows
    it once its engine has started)."""

    def __init__(self, app: ASGIApp, tracer: Tracer, model_name: Callable[[], str]) -> None:
        self.app = app
        self.tracer = tracer
        self.model_name = model_name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not traced_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == _HEADER), None)
        parent = parse_traceparent(header.decode("latin-1") if header is not None else None)
        if not self.tracer.enabled:
            # nothing recorded: only the context, for the backend and the answer (~5 us)
            span = self.tracer.start_span("", parent, "server")
            scope[_SPAN] = span
            await self.app(scope, receive, _answering(send, span))
            return
        await self._record(scope, receive, send, parent)

    async def _record(self, scope: Scope, receive: Receive, send: Send,
                      parent: TraceParent | None) -> None:
        method = scope["method"]
        span = self.tracer.start_span(f"{method} {scope['path']}", parent, "server",
                                      {"tandem.model": self.model_name(),
                                       "http.request.method": method,
                                       "url.path": scope["path"]})
        scope[_SPAN] = span
        answer = (_HEADER, format_traceparent(span.context).encode())
        status = 0

        async def send_traced(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                span.set_attributes({_WORKER_HEADERS[k.lower()]: v.decode("latin-1")
                                     for k, v in headers if k.lower() in _WORKER_HEADERS})
                message = {**message, "headers": [*headers, answer]}
            await send(message)

        try:
            await self.app(scope, receive, send_traced)
        except BaseException as exc:   # cancelled (the client left) or a crash: the span says so
            span.set_error(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            # the route's template (/v1/files/{file_id}), set by the router once it matched: the
            # span's name stays one per route, not one per id
            template = getattr(scope.get("route"), "path", None)
            if template is not None and template != scope["path"]:
                span.rename(f"{method} {template}")
            span.set_attributes({"http.response.status_code": status,
                                 "http.route": template or scope["path"]})
            if status >= 500:
                span.set_error(f"answered {status}")
            span.end()


def _answering(send: Send, span: Span) -> Send:
    """`send` with the span's context added to the response's headers."""
    answer = (_HEADER, format_traceparent(span.context).encode())

    async def send_answering(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), answer]}
        await send(message)

    return send_answering


def wall_ns(monotonic_s: float) -> int:
    """A time.monotonic() reading as wall-clock ns since the epoch (what spans carry)."""
    return time.time_ns() - int((time.monotonic() - monotonic_s) * 1e9)


def record_final(span: Span, d: RequestDelta) -> None:
    """What a worker's final delta says about its engine request: token counts, finish reason,
    and the engine's timing as events (queued at arrival, first scheduled, first token)."""
    span.set_attributes({"gen_ai.usage.input_tokens": d.num_prompt_tokens,
                         "gen_ai.usage.output_tokens": d.num_output_tokens,
                         "tandem.cached_tokens": d.num_cached_tokens,
                         "tandem.finish_reason": d.finish_reason.value if d.finish_reason else "none"})
    if d.finish_reason is FinishReason.ERROR:
        span.set_error(d.error or "generation failed")
    t = d.timings
    if t is None:
        return
    for name, at in (("queued", t.arrival), ("scheduled", t.first_scheduled),
                     ("first_token", t.first_token)):
        if at is not None:
            span.add_event(name, wall_ns(at))
