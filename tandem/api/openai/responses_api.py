"""The Responses API: `POST /v1/responses`, `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}`.

A request runs as the chat request it converts to (chat_turn.py: the chat template, sampling
defaults, tool-choice grammar) through the same GenerationRun and backend as
/v1/chat/completions, so it works on a worker and on the gateway alike. The output is parsed
(tandem/parsers) into reasoning, text and function calls (responses_format.py). Responses are
stored per app unless `store: false`, for `previous_response_id` and retrieval. Errors are
OpenAI-style; an error after the stream began is an `error` event then `response.failed`.
A stored response is its creator tenant's: another tenant's id is a 404 for GET, DELETE and
`previous_response_id` alike (responses_store.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.auth import tenant_of
from tandem.api.chat_turn import ChatTurn, chat_request, off_loop
from tandem.api.context import ServerContext
from tandem.api.disconnect import in_own_task
from tandem.api.errors import as_tandem_error, openai_error_response
from tandem.api.openai.openai_api import name_grammar_param
from tandem.api.openai.openai_protocol import ParsedRequest
from tandem.api.openai.responses_format import ResponseBuilder, new_id
from tandem.api.openai.responses_items import items_to_messages
from tandem.api.openai.responses_protocol import ResponsesRequest, parse_responses
from tandem.api.openai.responses_store import ResponseNotFound, ResponseStore, StoredResponse
from tandem.api.request_body import OFF_LOOP_BYTES, read_json_body
from tandem.api.request_context import http_context, with_agent
from tandem.api.responses import json_response, sse_response
from tandem.api.run import GenerationRun, check_delta
from tandem.errors import TandemError
from tandem.turn.turn_output import TurnOutput


@dataclass(frozen=True)
class ResponsesConfig:
    max_stored: int = 1024     # responses kept for previous_response_id / retrieval (LRU)


def responses_routes(ctx: ServerContext, config: ResponsesConfig = ResponsesConfig()) -> list[Route]:
    store = ResponseStore(config.max_stored)

    def prepare(req: ResponsesRequest, history: list[dict]) -> tuple[ChatTurn, ParsedRequest]:
        turn = req.with_history(history)
        return turn, chat_request(turn, ctx.parse_context())

    async def create(request: Request) -> Response:
        try:
            body, size = await read_json_body(request, ctx.config.max_body_bytes)
            req = parse_responses(body, ctx.served_name)
            history: list[dict] = []
            if req.previous_response_id is not None:
                history = list(store.get(req.previous_response_id, tenant_of(request.scope),
                                         "previous_response_id").conversation)
            turn, parsed = await off_loop(lambda: prepare(req, history),
                                          size >= OFF_LOOP_BYTES or len(history) > 8)
            return await _serve(request, req, history, turn, parsed)
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as exc:
            return openai_error_response(exc)

    async def _serve(request: Request, req: ResponsesRequest, history: list[dict], turn: ChatTurn,
                     parsed: ParsedRequest) -> Response:
        rid = new_id("resp")
        context = with_agent(replace(http_context(request, ctx.config, cache_salt=turn.cache_salt,
                                                  priority=turn.priority), parser=parsed.parser_options),
                             request, parsed.expect_next_turn_s)
        run = ctx.run(parsed.engine_requests(rid, context))
        out = TurnOutput(parsed.output.stream(rid) if parsed.output else None, len(parsed.prompts[0]))
        sp = parsed.sampling
        builder = ResponseBuilder(rid, turn.model, req.echo,
                                  {"temperature": sp.temperature, "top_p": sp.top_p}, parsed.stream)

        def save() -> None:
            if req.store and builder.final is not None:
                reply = items_to_messages(builder.final["output"], "output") \
                    or [{"role": "assistant", "content": ""}]
                conversation = history + req.new_messages + reply   # instructions left out
                store.put(rid, StoredResponse(builder.final, tuple(conversation), context.tenant))

        try:
            if not parsed.stream:
                body = await in_own_task(_collect(run, out, builder))
                save()
                return json_response(body, headers=run.info.headers)
            await run.start()
        except TandemError as exc:   # the gateway re-raises a worker's 400 as a TandemError
            raise name_grammar_param(exc, parsed.grammar_param) from None
        return sse_response(_stream(run, out, builder, save), headers=run.info.headers)

    async def retrieve(request: Request) -> Response:
        try:
            return json_response(store.get(request.path_params["response_id"],
                                           tenant_of(request.scope)).response)
        except Exception as exc:
            return openai_error_response(exc)

    async def delete(request: Request) -> Response:
        rid = request.path_params["response_id"]
        if not store.delete(rid, tenant_of(request.scope)):
            return openai_error_response(ResponseNotFound(f"Response with id '{rid}' not found."))
        return json_response({"id": rid, "object": "response", "deleted": True})

    return [Route("/v1/responses", create, methods=["POST"]),
            Route("/v1/responses/{response_id}", retrieve, methods=["GET"]),
            Route("/v1/responses/{response_id}", delete, methods=["DELETE"])]


async def _collect(run: GenerationRun, out: TurnOutput, builder: ResponseBuilder) -> dict:
    try:
        await run.start()
        async for _, d in run.deltas():
            builder.add(out.feed(check_delta(d)))
    finally:
        await run.aclose()
    builder.finish(out)
    assert builder.final is not None
    return builder.final


async def _stream(run: GenerationRun, out: TurnOutput, builder: ResponseBuilder,
                  save: Callable[[], None]) -> AsyncIterator[bytes]:
    try:
        yield builder.start()
        async for _, d in run.deltas():
            chunk = builder.add(out.feed(check_delta(d)))
            if chunk:
                yield chunk
        yield builder.finish(out)
        save()
    except Exception as exc:
        yield builder.fail(as_tandem_error(exc))
    finally:
        await run.aclose()
