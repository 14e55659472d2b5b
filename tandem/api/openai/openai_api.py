"""OpenAI routes: /v1/chat/completions, /v1/completions, /v1/models, /v1/models/{model}.

Flow of a request: parse (400/404/413 before any engine work) -> GenerationRun.start()
(engine errors before the first token still get their status; backend headers known) ->
either collect into one JSON object or stream SSE events ending with `data: [DONE]`.
A client that disconnects has the request's task cancelled (tandem.api.disconnect), which
closes the run and so aborts its engine requests.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.context import ServerContext
from tandem.api.disconnect import in_own_task
from tandem.api.errors import as_tandem_error, openai_error_body, openai_error_response
from tandem.api.openai.openai_format import OpenAIFormatter, make_id
from tandem.api.openai.openai_protocol import ParsedRequest, parse_chat, parse_completion
from tandem.api.request_body import parse_off_loop, read_json_body
from tandem.api.request_context import http_context, with_agent
from tandem.api.responses import SSE_DONE, json_response, sse_event, sse_response
from tandem.api.run import GenerationRun, check_delta
from tandem.errors import ModelNotFound, TandemError


async def serve_parsed(request: Request, ctx: ServerContext, parsed: ParsedRequest) -> Response:
    """Run a parsed OpenAI request and answer it (streaming or not)."""
    rid = make_id("chatcmpl" if parsed.kind == "chat" else "cmpl")
    context = with_agent(replace(http_context(request, ctx.config, cache_salt=parsed.cache_salt,
                                              priority=parsed.priority), parser=parsed.parser_options),
                         request, parsed.expect_next_turn_s)
    run = ctx.run(parsed.engine_requests(rid, context), choices_per_prompt=parsed.n)
    fmt = OpenAIFormatter(parsed, rid, ctx.fingerprint, ctx.token_texts)
    try:
        if not parsed.stream:
            body = await in_own_task(_collect(run, fmt))
            return json_response(body, headers=run.info.headers)
        await run.start()
    except TandemError as exc:   # the gateway re-raises a worker's 400 as a TandemError
        raise name_grammar_param(exc, parsed.grammar_param)
    return sse_response(_stream(run, fmt), headers=run.info.headers)


def name_grammar_param(exc: TandemError, param: str | None) -> TandemError:
    """The engine names every constraint that does not compile `structured_outputs`; the client
    gets the field it actually used (response_format, tools, guided_json...)."""
    if param is not None and exc.param == "structured_outputs":
        exc.param = param
    return exc


async def _collect(run: GenerationRun, fmt: OpenAIFormatter) -> dict:
    try:
        await run.start()
        async for i, d in run.deltas():
            fmt.add(i, check_delta(d))
    finally:
        await run.aclose()
    return fmt.response()


async def _stream(run: GenerationRun, fmt: OpenAIFormatter) -> AsyncIterator[bytes]:
    """SSE body. An error after the first byte can only be reported in-band: one
    `data: {"error": ...}` event, then [DONE]."""
    try:
        start = fmt.stream_start()
        if start:
            yield start
        async for i, d in run.deltas():
            chunk = fmt.stream_delta(i, check_delta(d))
            if chunk:
                yield chunk
        yield fmt.stream_end() + SSE_DONE
    except Exception as exc:
        yield sse_event(openai_error_body(as_tandem_error(exc))) + SSE_DONE
    finally:
        await run.aclose()


def openai_routes(ctx: ServerContext) -> list[Route]:
    async def handle(request: Request, parse) -> Response:
        try:
            body, size = await read_json_body(request, ctx.config.max_body_bytes)
            parsed = await parse_off_loop(parse, body, ctx.parse_context(), size)
            return await serve_parsed(request, ctx, parsed)
        except ClientDisconnect:   # left while sending the body
            return Response(status_code=499)  # nobody is listening; nginx's "client closed"
        except Exception as exc:
            return openai_error_response(exc)

    async def chat(request: Request) -> Response:
        return await handle(request, parse_chat)

    async def completions(request: Request) -> Response:
        return await handle(request, parse_completion)

    def model_card() -> dict:
        root = ctx.worker.model_path if ctx.worker is not None else None
        return {"id": ctx.served_name, "object": "model", "created": int(time.time()),
                "owned_by": "tandem", "max_model_len": ctx.backend.max_model_len,
                "root": root or ctx.served_name}

    async def models(request: Request) -> Response:
        return json_response({"object": "list", "data": [model_card()]})

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        if name != ctx.served_name:
            return openai_error_response(ModelNotFound(
                f"The model '{name}' does not exist; this server serves '{ctx.served_name}'", param="model"))
        return json_response(model_card())

    return [Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", model, methods=["GET"])]
