"""The worker's internal API, used by the gateway (docs/dev/contracts.md, "Worker internal API").

POST /internal/generate: body wire.request_to_dict(EngineRequest); answer application/x-ndjson,
one wire.delta_to_dict(RequestDelta) per line. A TandemError before the first line is an
OpenAI-style error JSON with its status; a failure after it is a final delta with
finish_reason "error". Closing the HTTP request aborts the engine request.
GET /internal/stats: EngineStats as JSON plus kv_layout and role.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.server.context import ServerContext
from tandem.server.disconnect import ClientGone, until_disconnect
from tandem.server.errors import as_tandem_error, openai_error_response
from tandem.server.request_body import read_json_object
from tandem.server.responses import json_response, ndjson_response
from tandem.server.run import GenerationRun
from tandem.server.wire import delta_to_dict, request_from_dict
from tandem.types import FinishReason, RequestDelta


async def _lines(run: GenerationRun) -> AsyncIterator[bytes]:
    request_id = run.requests[0].request_id
    try:
        async for _, d in run.deltas():
            yield orjson.dumps(delta_to_dict(d)) + b"\n"
    except Exception as exc:
        err = as_tandem_error(exc)
        failed = RequestDelta(request_id=request_id, new_token_ids=[], new_text="", finished=True,
                              finish_reason=FinishReason.ERROR, error=err.message)
        yield orjson.dumps(delta_to_dict(failed)) + b"\n"
    finally:
        await run.aclose()


def internal_routes(ctx: ServerContext) -> list[Route]:
    async def generate(request: Request) -> Response:
        try:
            body = await read_json_object(request, ctx.config.max_body_bytes)
            run = ctx.run([request_from_dict(body)])
            try:
                await until_disconnect(request, run.start)
            except BaseException:
                await run.aclose()
                raise
            return ndjson_response(_lines(run), headers=run.info.headers)
        except (ClientGone, ClientDisconnect):
            return Response(status_code=499)
        except Exception as exc:
            return openai_error_response(exc)

    async def stats(request: Request) -> Response:
        backend = ctx.backend
        layout = getattr(backend, "kv_layout", None)  # only a WorkerBackend has a KV cache
        body = asdict(backend.stats())
        body["kv_layout"] = layout.to_dict() if layout is not None else None
        body["role"] = getattr(backend, "role", None)
        return json_response(body)

    return [Route("/internal/generate", generate, methods=["POST"]),
            Route("/internal/stats", stats, methods=["GET"])]
