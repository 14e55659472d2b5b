"""A gateway's call to one worker as a span: a child of the client request's server span
(RequestContext.trace), whose context goes to the worker in the `traceparent` header, so the
worker's span is in turn its child (docs/tracing.md). One span per call: a retried or migrated
request has one per attempt, the failed ones marked as errors with the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

from tandem.errors import TandemError
from tandem.gateway.worker_client import WorkerFailed, WorkerHTTP, stream_generate
from tandem.tracing.traceparent import HEADER, format_traceparent
from tandem.tracing.tracer import Tracer
from tandem.types import EngineRequest, RequestDelta, TraceParent


def traced_generate(tracer: Tracer, parent: TraceParent | None, http: WorkerHTTP, url: str,
                    req: EngineRequest, pool: str, read_timeout_s: float
                    ) -> AsyncIterator[RequestDelta]:
    """stream_generate's deltas, inside a client span named after the call's role. Nothing
    recorded (no endpoint): stream_generate itself, with the header, so no delta pays for tracing."""
    if not tracer.enabled:
        context = tracer.start_span("", parent, "client").context
        return stream_generate(http, url, req, pool, read_timeout_s,
                               {HEADER: format_traceparent(context)})
    return _recorded(tracer, parent, http, url, req, pool, read_timeout_s)


async def _recorded(tracer: Tracer, parent: TraceParent | None, http: WorkerHTTP, url: str,
                    req: EngineRequest, pool: str, read_timeout_s: float
                    ) -> AsyncIterator[RequestDelta]:
    span = tracer.start_span(f"{pool} call", parent, "client",
                             {"tandem.pool": pool, "tandem.worker.url": url,
                              "tandem.request_id": req.request_id,
                              "tandem.resumed_tokens": len(req.resume_output_ids)})
    tokens = 0
    try:
        async with aclosing(stream_generate(http, url, req, pool, read_timeout_s,
                                            {HEADER: format_traceparent(span.context)})) as deltas:
            async for d in deltas:
                tokens += len(d.new_token_ids)
                if d.finished:
                    span.set_attributes({"tandem.finish_reason": d.finish_reason.value
                                         if d.finish_reason else "none",
                                         "tandem.cached_tokens": d.num_cached_tokens})
                yield d
    except WorkerFailed as exc:
        span.set_error(exc.message)
        raise
    except TandemError as exc:   # the worker refused the request (the client's 4xx)
        span.set_error(exc.message)
        raise
    finally:
        span.set_attributes({"tandem.output_tokens": tokens})
        span.end()
