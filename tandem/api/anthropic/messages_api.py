"""Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

A request runs as the chat request it converts to (chat_turn.py: the chat template, sampling
defaults, tool-choice grammar, output parsers) through the same GenerationRun and backend as
/v1/chat/completions, so it works on a worker and on the gateway alike. The output is parsed into
thinking, text and tool_use blocks (messages_format.py). Keys come as `x-api-key` (or Bearer;
api/auth.py); `anthropic-version` and `anthropic-beta` are accepted and not checked. Errors
are Anthropic's `{"type": "error", "error": {"type", "message"}}`; after the stream began, an
`error` event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.anthropic.messages_format import MessageBuilder, message_id, tool_use_id
from tandem.api.anthropic.messages_protocol import MessagesRequest, parse_messages
from tandem.api.chat_turn import chat_request, off_loop
from tandem.api.context import ServerContext
from tandem.api.disconnect import in_own_task
from tandem.api.errors import anthropic_error, anthropic_error_response
from tandem.api.openai.openai_api import name_grammar_param
from tandem.api.openai.openai_protocol import ParsedRequest
from tandem.api.request_body import OFF_LOOP_BYTES, read_json_body
from tandem.api.request_context import http_context, with_agent
from tandem.api.responses import json_response, sse_response
from tandem.api.run import GenerationRun, check_delta
from tandem.errors import TandemError
from tandem.turn.chat_output import ChoiceOutput
from tandem.turn.turn_output import TurnOutput


def _parser(parsed: ParsedRequest, msg_id: str) -> ChoiceOutput | None:
    """The output parser, its calls named as Anthropic names tool uses (`toolu_...`), unless the
    format's templates need their own ids (mistral)."""
    if parsed.output is None:
        return None
    default = parsed.output.stream(msg_id)
    tool = parsed.output.parser.tool
    if tool is not None and tool.name == "mistral":
        return default
    return ChoiceOutput(parsed.output, tool_use_id)


def messages_routes(ctx: ServerContext) -> list[Route]:
    def prepare(body: dict, count_only: bool) -> tuple[MessagesRequest, ParsedRequest]:
        req = parse_messages(body, ctx.served_name, count_only)
        return req, chat_request(req.turn, ctx.parse_context())

    async def create(request: Request) -> Response:
        try:
            body, size = await read_json_body(request, ctx.config.max_body_bytes)
            req, parsed = await off_loop(lambda: prepare(body, False), size >= OFF_LOOP_BYTES)
            return await _serve(request, req, parsed)
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as exc:
            return anthropic_error_response(exc)

    async def _serve(request: Request, req: MessagesRequest, parsed: ParsedRequest) -> Response:
        mid = message_id()
        context = with_agent(replace(http_context(request, ctx.config), parser=parsed.parser_options),
                             request, parsed.expect_next_turn_s)
        run = ctx.run(parsed.engine_requests(mid, context))
        out = TurnOutput(_parser(parsed, mid), len(parsed.prompts[0]))
        builder = MessageBuilder(mid, req.turn.model, parsed.stream)

        def stop_sequence() -> str | None:
            return out.stop_sequence(req.stop_sequences, ctx.backend.tokenizer,
                                     parsed.sampling.skip_special_tokens)

        try:
            if not parsed.stream:
                body = await in_own_task(_collect(run, out, builder, stop_sequence))
                return json_response(body, headers=run.info.headers)
            await run.start()
        except TandemError as exc:   # the gateway re-raises a worker's 400 as a TandemError
            raise name_grammar_param(exc, parsed.grammar_param) from None
        return sse_response(_stream(run, out, builder, stop_sequence), headers=run.info.headers)

    async def count_tokens(request: Request) -> Response:
        try:
            body, size = await read_json_body(request, ctx.config.max_body_bytes)
            _, parsed = await off_loop(lambda: prepare(body, True), size >= OFF_LOOP_BYTES)
            return json_response({"input_tokens": len(parsed.prompts[0])})
        except Exception as exc:
            return anthropic_error_response(exc)

    return [Route("/v1/messages", create, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"])]


async def _collect(run: GenerationRun, out: TurnOutput, builder: MessageBuilder,
                   stop_sequence) -> dict:
    try:
        await run.start()
        async for _, d in run.deltas():
            builder.add(out.feed(check_delta(d)), out)
    finally:
        await run.aclose()
    builder.finish(out, stop_sequence())
    assert builder.final is not None
    return builder.final


async def _stream(run: GenerationRun, out: TurnOutput, builder: MessageBuilder,
                  stop_sequence) -> AsyncIterator[bytes]:
    try:
        async for _, d in run.deltas():
            chunk = builder.add(out.feed(check_delta(d)), out)
            if chunk:
                yield chunk
        yield builder.finish(out, stop_sequence())
    except Exception as exc:
        yield builder.fail(*anthropic_error(exc))
    finally:
        await run.aclose()
