"""The worker's internal API, used by the gateway (docs/dev/contracts.md, "Worker internal API").

POST /internal/generate: body wire.request_to_dict(EngineRequest); answer application/x-ndjson,
one wire.delta_to_dict(RequestDelta) per line. A TandemError before the first line is an
OpenAI-style error JSON with its status; a failure after it is a final delta with
finish_reason "error". Closing the HTTP request aborts the engine request. Its span
(tandem/api/tracing.py, a child of the gateway's `traceparent`) gets the request's token counts,
finish reason and engine timing.
GET /internal/stats: EngineStats as JSON plus kv_layout and role, and what the gateway needs to
route: instance_id (new at every start: a restarted worker has a new cache), hash_seed and
block size (to hash prompts like the worker), model name, max_model_len, transport address,
`draining` (the worker is stopping, tandem/api/drain.py: send it nothing new).
POST /internal/kv_release {"request_id"}: a prefill worker's handed-over blocks will not be pulled
(the gateway could not start the decode call); they are freed without waiting for the pin timeout.
GET /internal/kv_events?since=SEQ: the backend's KV event batch (tandem.kv.events); 404 for a
backend without events.
POST /internal/role {"role", "drain_timeout_s"?}: switch this worker's role at runtime (drain, then
switch in-process: tandem/api/internal/role_switch.py); 202 while it drains, 200 if it already
has that role, 409 while another switch is under way. GET /internal/role: the role and the switch
under way. /internal/stats reports the same `role` and `switching_to`. 404 on a backend without a
KV cache (the gateway's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.context import ServerContext
from tandem.api.errors import as_tandem_error, openai_error_response
from tandem.api.internal.role_metric import GATEWAY_ROLE, RoleCollector
from tandem.api.internal.role_switch import WorkerRole
from tandem.api.internal.wire import delta_to_dict, request_from_dict
from tandem.api.request_body import read_json_object
from tandem.api.responses import json_response, ndjson_response
from tandem.api.run import GenerationRun
from tandem.api.tracing import record_final, span_of
from tandem.errors import InvalidRequest, TandemError
from tandem.tracing.span import Span
from tandem.types import FinishReason, RequestDelta


async def _lines(run: GenerationRun, span: Span | None) -> AsyncIterator[bytes]:
    request_id = run.requests[0].request_id
    try:
        async for _, d in run.deltas():
            if d.finished and span is not None:
                record_final(span, d)   # before the last line: the span ends with the response
            yield orjson.dumps(delta_to_dict(d)) + b"\n"
    except Exception as exc:
        err = as_tandem_error(exc)
        failed = RequestDelta(request_id=request_id, new_token_ids=[], new_text="", finished=True,
                              finish_reason=FinishReason.ERROR, error=err.message)
        if span is not None:
            record_final(span, failed)
        yield orjson.dumps(delta_to_dict(failed)) + b"\n"
    finally:
        await run.aclose()


def internal_routes(ctx: ServerContext) -> list[Route]:
    # a worker's role, switchable at runtime; None on a backend without a KV cache
    roles = WorkerRole(ctx.worker) if ctx.worker is not None else None
    # /metrics reports the role these routes switch (tandem:server_role), read at each scrape
    ctx.metrics.registry.register(RoleCollector(lambda: roles.role if roles else GATEWAY_ROLE))

    async def generate(request: Request) -> Response:
        if roles is not None:
            roles.admitting += 1   # until the engine has the request (run.start saw its first delta)
        try:
            body = await read_json_object(request, ctx.config.max_body_bytes)
            req = request_from_dict(body)
            span = span_of(request.scope)
            if span is not None:
                span.set_attributes({"tandem.request_id": req.request_id,
                                     "tandem.prefill_only": req.prefill_only,
                                     "tandem.kv_handle": req.kv_handle is not None})
            run = ctx.run([req], metered=False, prepared=True)
            await run.start()
            return ndjson_response(_lines(run, span), headers=run.info.headers)
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as exc:
            return openai_error_response(exc)
        finally:
            if roles is not None:
                roles.admitting -= 1

    async def stats(request: Request) -> Response:
        body = asdict(ctx.backend.stats())
        body.update(_worker_facts(ctx, roles))
        return json_response(body)

    async def role(request: Request) -> Response:
        if roles is None:
            return openai_error_response(NotFound("this backend has no role (it is not a worker)"))
        if request.method == "GET":
            return json_response(roles.report())
        try:
            body = await read_json_object(request, 65536)
            timeout = body.get("drain_timeout_s")
            if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
                raise InvalidRequest("'drain_timeout_s' must be a non-negative number of seconds",
                                     param="drain_timeout_s")
            started = roles.request(body.get("role"), timeout)
        except Exception as exc:
            return openai_error_response(exc)
        return json_response(roles.report(), status=202 if started else 200)

    async def kv_events(request: Request) -> Response:
        if ctx.kv_events is None:
            return openai_error_response(NotFound("this backend publishes no KV events"))
        raw = request.query_params.get("since", "0")
        if not raw.isdigit():
            return openai_error_response(
                InvalidRequest(f"'since' must be a non-negative integer, got {raw!r}", param="since"))
        return json_response(ctx.kv_events.kv_events(int(raw)).to_dict())

    async def kv_release(request: Request) -> Response:
        if ctx.kv_handoff is None:
            return openai_error_response(NotFound("this backend hands over no KV blocks"))
        try:
            body = await read_json_object(request, ctx.config.max_body_bytes)
            request_id = body.get("request_id")
            if not isinstance(request_id, str):
                raise InvalidRequest("'request_id' must be a string", param="request_id")
        except Exception as exc:
            return openai_error_response(exc)
        ctx.kv_handoff.release_kv(request_id)
        return json_response({"released": request_id})

    return [Route("/internal/generate", generate, methods=["POST"]),
            Route("/internal/kv_release", kv_release, methods=["POST"]),
            Route("/internal/stats", stats, methods=["GET"]),
            Route("/internal/kv_events", kv_events, methods=["GET"]),
            Route("/internal/role", role, methods=["GET", "POST"])]


class NotFound(TandemError):
    status = 404
    error_type = "not_found_error"


def _worker_facts(ctx: ServerContext, roles: WorkerRole | None) -> dict:
    """What the gateway routes by. A backend without its own KV cache (the gateway's) has no
    layout, role, hash seed or transport: null. `switching_to`: a role switch under way (the
    worker drains: send it nothing new)."""
    facts = {"kv_layout": None, "role": None, "switching_to": None, "instance_id": ctx.instance_id,
             "model": ctx.served_name, "max_model_len": ctx.backend.max_model_len,
             "hash_seed": None, "enable_prefix_caching": None, "transport_address": None,
             "draining": ctx.drain.draining}
    w = ctx.worker
    if w is not None:
        cache = w.config.cache
        facts.update(kv_layout=w.kv_layout.to_dict(), role=roles.role,
                     switching_to=roles.switching_to, hash_seed=cache.hash_seed,
                     enable_prefix_caching=cache.enable_prefix_caching,
                     transport_address=w.transport_address)
    return facts
