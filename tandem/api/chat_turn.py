"""One conversational turn as the Responses and Messages routes read it, and the chat request it
becomes: the same chat template, prompt ids, sampling defaults, tool and structured-output plan
(turn/chat_plan.py: tool-call grammar, output parsers) and engine path as /v1/chat/completions
(a `ParsedRequest` of kind "chat").

Each API converts its body into a `ChatTurn` (OpenAI chat messages, a `ToolRequest`, the few
sampling knobs it has); `chat_request` renders and checks it. Errors name the client's own
parameter (`TurnParams`: "input" for Responses, "messages" for Messages).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tandem.api.openai.openai_protocol import (
    ParseContext,
    ParsedRequest,
    check_prompt_fits,
    prompt_tail,
    with_plan,
)
from tandem.tokenization.chat_prompt import ChatRender, render_chat
from tandem.turn.chat_plan import plan_chat
from tandem.turn.chat_request import normalize_messages
from tandem.turn.tool_request import ToolRequest
from tandem.types import GrammarSpec, SamplingParams

T = TypeVar("T")


@dataclass(frozen=True)
class TurnParams:
    """How an API names the fields a turn's errors point at."""

    messages: str = "messages"
    max_tokens: str = "max_tokens"
    structured: str = "response_format"


@dataclass(frozen=True)
class ChatTurn:
    model: str                          # as the client named it (echoed)
    messages: list[dict]                # OpenAI chat messages, system first if any
    tools: ToolRequest = ToolRequest()  # OpenAI-shaped tools, tool_choice, parallel_tool_calls
    structured: GrammarSpec | None = None  # a structured-output constraint on the text
    max_tokens: int | None = None       # None: the room the context leaves (capped by the model's default)
    temperature: float | None = None    # None: the model's default (generation_config.json)
    top_p: float | None = None
    top_k: int | None = None            # 0: off
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    cache_salt: str | None = None
    priority: int = 0
    expect_next_turn_s: float | None = None   # body `agent.expect_next_turn_s` (turn/agent_hint.py)
    params: TurnParams = field(default_factory=TurnParams)


def chat_request(turn: ChatTurn, pctx: ParseContext) -> ParsedRequest:
    """The chat request of `turn`: prompt ids through the chat template, sampling with the
    model's defaults for what the turn leaves out, and the chat route's plan for its tools
    (grammar for forced or auto calls, output parsers)."""
    p = turn.params
    messages = normalize_messages(turn.messages, p.messages)
    ids = render_chat(pctx.tokenizer, messages, turn.tools.tools, ChatRender(), param=p.messages)
    check_prompt_fits(ids, pctx, p.messages)
    plan = plan_chat(pctx.parsers, turn.tools, turn.structured,
                     p.structured if turn.structured else None, prompt_tail(pctx, ids))
    d = pctx.defaults
    max_tokens = turn.max_tokens
    if max_tokens is None:  # as the chat route: whatever room the context leaves
        max_tokens = pctx.max_model_len - len(ids)
        if d.max_tokens is not None:
            max_tokens = min(max_tokens, d.max_tokens)
    sampling = SamplingParams(
        max_tokens=max_tokens,
        temperature=d.temperature if turn.temperature is None else turn.temperature,
        top_p=d.top_p if turn.top_p is None else turn.top_p,
        top_k=d.top_k if turn.top_k is None else turn.top_k,
        min_p=d.min_p,
        repetition_penalty=d.repetition_penalty,
        seed=turn.seed,
        stop=turn.stop,
    )
    sampling.validate()
    parsed = ParsedRequest(kind="chat", model=turn.model, prompts=(tuple(ids),), sampling=sampling,
                           stream=turn.stream, cache_salt=turn.cache_salt, priority=turn.priority,
                           expect_next_turn_s=turn.expect_next_turn_s)
    return with_plan(parsed, plan)


async def off_loop(fn: Callable[[], T], big: bool) -> T:
    """`fn()` (reading a body, rendering its turn) on a worker thread when the work is big (a long
    body, a long history), so the event loop keeps streaming other requests' tokens meanwhile."""
    return await asyncio.to_thread(fn) if big else fn()
