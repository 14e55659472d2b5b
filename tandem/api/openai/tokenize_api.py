"""vLLM's token routes: POST /tokenize and POST /detokenize.

/tokenize takes either `prompt` (text; `add_special_tokens`, default true) or chat `messages`
(with `tools` and `chat_template_kwargs`, rendered exactly as /v1/chat/completions renders them,
ready for the assistant's turn) and answers {"count", "max_model_len", "tokens"}: what an agent
harness needs to budget its context. /detokenize takes `tokens` and answers {"prompt": text}.
`model` may be left out; when given it must name the served model (404 otherwise).
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.context import ServerContext
from tandem.api.errors import openai_error_response
from tandem.api.openai.openai_protocol import check_model
from tandem.api.request_body import parse_off_loop, read_json_body
from tandem.api.responses import json_response
from tandem.tokenization.chat_prompt import render_chat
from tandem.turn.chat_request import chat_render, normalize_messages, validate_tools
from tandem.turn.fields import Fields, bad


def _fields(body: dict, ctx: ServerContext) -> Fields:
    f = Fields(body)
    if f.has("model"):
        check_model(f, ctx.served_name)
    return f


def tokenize(body: dict, ctx: ServerContext) -> dict:
    f = _fields(body, ctx)
    tokenizer = ctx.backend.tokenizer
    if f.has("messages") == f.has("prompt"):
        raise bad("prompt", "give exactly one of 'prompt' and 'messages'")
    if f.has("prompt"):
        special = f.bool("add_special_tokens", True)
        ids = list(tokenizer.encode(f.str("prompt"), add_special_tokens=special))
    else:
        messages = normalize_messages(f.raw("messages"))
        ids = render_chat(tokenizer, messages, validate_tools(f.raw("tools"), None), chat_render(f))
    return {"count": len(ids), "max_model_len": ctx.backend.max_model_len, "tokens": ids}


def detokenize(body: dict, ctx: ServerContext) -> dict:
    f = _fields(body, ctx)
    if not f.has("tokens"):
        raise bad("tokens", "is required")
    ids = f.int_list("tokens", 0, ctx.backend.tokenizer.vocab_size - 1)
    return {"prompt": ctx.backend.tokenizer.decode(ids, skip_special_tokens=False)}


def tokenize_routes(ctx: ServerContext) -> list[Route]:
    def route(handler):
        async def endpoint(request: Request) -> Response:
            try:
                body, size = await read_json_body(request, ctx.config.max_body_bytes)
                return json_response(await parse_off_loop(handler, body, ctx, size))
            except ClientDisconnect:
                return Response(status_code=499)
            except Exception as exc:
                return openai_error_response(exc)
        return endpoint

    return [Route("/tokenize", route(tokenize), methods=["POST"]),
            Route("/detokenize", route(detokenize), methods=["POST"])]
