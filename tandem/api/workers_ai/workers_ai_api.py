"""Cloudflare Workers AI routes: POST /client/v4/accounts/{account_id}/ai/run/{model}.

Body {messages | prompt, max_tokens, stream, temperature, top_p, top_k, seed,
repetition_penalty, frequency_penalty, presence_penalty, raw, lora, tools, response_format}.
A `prompt` goes through the chat template as one user message unless `raw` is true. `tools` are
Workers AI's (`{name, description, parameters}`) or OpenAI's; the calls come back parsed in
`result.tool_calls` (workers_ai_output.py); without them the model's call opening is masked (the
tool-call guard, turn/tool_guard.py), except after a raw prompt. `response_format`
{"type": "json_object"} or {"type": "json_schema", "json_schema": SCHEMA} constrains the response. Replies use Workers AI's
envelope; a stream is SSE `data: {"response": "..."}` events, then one event with an empty
response and the usage (and the tool calls), then `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.api.context import ServerContext
from tandem.api.disconnect import in_own_task
from tandem.api.errors import (
    as_tandem_error,
    workers_ai_error_body,
    workers_ai_error_response,
)
from tandem.api.openai.openai_api import name_grammar_param
from tandem.api.openai.openai_format import make_id
from tandem.api.openai.openai_protocol import (
    ParseContext,
    ParsedRequest,
    check_prompt_fits,
    prompt_tail,
    with_plan,
)
from tandem.api.request_body import parse_off_loop, read_json_body
from tandem.api.request_context import http_context, with_agent
from tandem.api.responses import SSE_DONE, json_response, sse_event, sse_response
from tandem.api.run import GenerationRun, check_delta
from tandem.api.workers_ai.workers_ai_output import UsageTally, WorkersAIOutput, WorkersAIResult
from tandem.errors import ModelNotFound, NotSupportedYet, TandemError
from tandem.tokenization.chat_prompt import render_chat
from tandem.turn.chat_plan import plan_chat
from tandem.turn.chat_request import normalize_messages
from tandem.turn.fields import Fields, bad
from tandem.turn.structured_output import read_structured_output
from tandem.turn.tool_request import ToolRequest, read_tools
from tandem.types import SamplingParams

WORKERS_AI_PATH = "/client/v4/accounts/{account_id}/ai/run/{model:path}"
DEFAULT_MAX_TOKENS = 256   # Workers AI's documented defaults
DEFAULT_TEMPERATURE = 0.6


def _last(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def model_matches(requested: str, served: str) -> bool:
    """`@cf/author/name` matches a served name equal to it or to its last segment."""
    return requested.lower() == served.lower() or _last(requested) in (served.lower(), _last(served))


def parse_workers_ai(body: dict, model: str, ctx: ParseContext) -> ParsedRequest:
    if not model_matches(model, ctx.served_name):
        raise ModelNotFound(f"No such model {model}; this server serves {ctx.served_name}",
                            param="model")
    f = Fields(body)
    if f.has("lora"):
        raise NotSupportedYet("lora")
    structured, structured_param = read_structured_output(f, lenient_schema=True)
    tools = ToolRequest()
    has_messages, has_prompt = f.has("messages"), f.has("prompt")
    if has_messages == has_prompt:
        raise bad("messages" if has_messages else "prompt",
                  "give exactly one of 'messages' and 'prompt'")
    raw = has_prompt and f.bool("raw", False)
    if raw:
        param = "prompt"
        ids = list(ctx.tokenizer.encode(f.str("prompt", nonempty=True), add_special_tokens=True))
    else:
        param = "messages" if has_messages else "prompt"
        messages = normalize_messages(f.raw("messages")) if has_messages else \
            [{"role": "user", "content": f.str("prompt", nonempty=True)}]
        tools = read_tools(f, flat=True)
        ids = render_chat(ctx.tokenizer, messages, tools.tools, param=param)
    check_prompt_fits(ids, ctx, param)
    top_k = f.int("top_k", 0, 0)
    sampling = SamplingParams(
        max_tokens=f.int("max_tokens", DEFAULT_MAX_TOKENS, 1),
        temperature=f.float("temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
        top_p=f.float("top_p", 1.0),
        top_k=top_k,
        seed=f.int("seed", None, 0, 2**63 - 1),
        repetition_penalty=f.float("repetition_penalty", 1.0),
        frequency_penalty=f.float("frequency_penalty", 0.0),
        presence_penalty=f.float("presence_penalty", 0.0),
    )
    sampling.validate()
    # a raw prompt is the client's own template: its output is the client's to read, calls included
    parsers = replace(ctx.parsers, tool_call_guard=False) if raw else ctx.parsers
    plan = plan_chat(parsers, tools, structured, structured_param, prompt_tail(ctx, ids))
    return with_plan(ParsedRequest(kind="chat", model=model, prompts=(tuple(ids),), sampling=sampling,
                                   stream=f.bool("stream", False)), plan)


async def collect_result(run: GenerationRun, parsed: ParsedRequest, request_id: str) -> dict:
    """The `result` of a finished run: {"response", "usage"} (+ "tool_calls", "reasoning_content")."""
    result = WorkersAIResult(parsed.output, request_id, len(run.requests[0].prompt_token_ids))
    try:
        await run.start()
        async for _, d in run.deltas():
            result.add(check_delta(d))
    finally:
        await run.aclose()
    return result.result()


async def _collect(run: GenerationRun, parsed: ParsedRequest, request_id: str) -> dict:
    return {"result": await collect_result(run, parsed, request_id),
            "success": True, "errors": [], "messages": []}


async def _stream(run: GenerationRun, parsed: ParsedRequest, request_id: str) -> AsyncIterator[bytes]:
    tally = UsageTally(len(run.requests[0].prompt_token_ids))
    out = WorkersAIOutput(parsed.output, request_id)
    try:
        async for _, d in run.deltas():
            check_delta(d)
            usage = tally.add(d)
            text = out.content(d.new_text, d.finished)
            if text:
                yield sse_event({"response": text})
            if usage is not None:
                yield sse_event({"response": "", **out.extra(), "usage": usage}) + SSE_DONE
    except Exception as exc:
        yield sse_event(workers_ai_error_body(as_tandem_error(exc))) + SSE_DONE
    finally:
        await run.aclose()


def workers_ai_routes(ctx: ServerContext) -> list[Route]:
    async def run_model(request: Request) -> Response:
        try:
            if request.query_params.get("queueRequest", "").lower() == "true":
                if ctx.queued is None:
                    raise NotSupportedYet("queueRequest", "without a queue (this server runs "
                                          "with --no-queue or under a gateway: queue on the "
                                          "gateway, or start it with --queue-db FILE or "
                                          "--queue-url URL)")
                return await ctx.queued(request)
            body, size = await read_json_body(request, ctx.config.max_body_bytes)
            model = request.path_params["model"]
            parsed = await parse_off_loop(lambda b, c: parse_workers_ai(b, model, c), body,
                                          ctx.parse_context(), size)
            rid = make_id("wai")
            context = with_agent(replace(http_context(request, ctx.config), parser=parsed.parser_options),
                                 request, None)
            run = ctx.run(parsed.engine_requests(rid, context))
            try:
                if not parsed.stream:
                    result = await in_own_task(_collect(run, parsed, rid))
                    return json_response(result, headers=run.info.headers)
                await run.start()
            except TandemError as exc:
                raise name_grammar_param(exc, parsed.grammar_param)
            return sse_response(_stream(run, parsed, rid), headers=run.info.headers)
        except ClientDisconnect:   # left while sending the body
            return Response(status_code=499)
        except Exception as exc:
            return workers_ai_error_response(exc)

    return [Route(WORKERS_AI_PATH, run_model, methods=["POST"])]
