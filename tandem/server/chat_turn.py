"""One conversational turn as the Responses and Messages routes read it, and the chat request it
becomes: the same chat template, prompt ids, sampling defaults and engine path as
/v1/chat/completions (a `ParsedRequest` of kind "chat").

Each API converts its body into a `ChatTurn` (OpenAI chat messages and tools, a tool choice,
the few sampling knobs it has); `chat_request` renders and checks it. Errors name the client's
own parameter (`TurnParams`: "input" for Responses, "messages" for Messages).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.server.chat_request import normalize_messages
from tandem.server.openai.openai_protocol import ParsedRequest, ParseContext, check_prompt_fits
from tandem.server.tool_grammar import tool_call_grammar
from tandem.server.turn_parsing import TurnParsing
from tandem.tokenization.chat_prompt import ChatRender, render_chat
from tandem.types import SamplingParams

TOOL_CHOICE_MODES = ("auto", "none", "required", "function")


@dataclass(frozen=True)
class ToolChoice:
    """auto: the model decides; none: no tools (left out of the prompt, output not parsed for
    calls); required: at least one call of an offered tool; function: one call of `name`."""

    mode: str = "auto"
    name: str | None = None


@dataclass(frozen=True)
class TurnParams:
    """How an API names the fields a turn's errors point at."""

    messages: str = "messages"
    max_tokens: str = "max_tokens"
    tools: str = "tools"


@dataclass(frozen=True)
class ChatTurn:
    model: str                          # as the client named it (echoed)
    messages: list[dict]                # OpenAI chat messages, system first if any
    tools: list[dict] | None = None     # OpenAI chat tools: {"type": "function", "function": {...}}
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool = True
    max_tokens: int | None = None       # None: the room the context leaves (capped by the model's default)
    temperature: float | None = None    # None: the model's default (generation_config.json)
    top_p: float | None = None
    top_k: int | None = None            # 0: off
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    cache_salt: str | None = None
    priority: int = 0
    params: TurnParams = field(default_factory=TurnParams)

    @property
    def offered_tools(self) -> list[dict] | None:
        """The tools the prompt offers and the output is parsed for (none: no tools)."""
        return None if self.tool_choice.mode == "none" else self.tools


def chat_request(turn: ChatTurn, pctx: ParseContext, parsing: TurnParsing) -> ParsedRequest:
    """The chat request of `turn`: prompt ids through the chat template, sampling with the
    model's defaults for what the turn leaves out, and, for tool_choice required or a named
    function, a grammar that makes the output a valid call in the model's tool-call format."""
    p = turn.params
    tools = turn.offered_tools
    messages = normalize_messages(turn.messages, p.messages)
    ids = render_chat(pctx.tokenizer, messages, tools, ChatRender(), param=p.messages)
    check_prompt_fits(ids, pctx, p.messages)
    d = pctx.defaults
    max_tokens = turn.max_tokens
    if max_tokens is None:  # as the chat route: whatever room the context leaves
        max_tokens = pctx.max_model_len - len(ids)
        if d.max_tokens is not None:
            max_tokens = min(max_tokens, d.max_tokens)
    grammar = None
    if tools and turn.tool_choice.mode in ("required", "function"):
        grammar = tool_call_grammar(parsing.tool_format, tools, turn.tool_choice.mode,
                                    turn.tool_choice.name, turn.parallel_tool_calls, p.tools)
    sampling = SamplingParams(
        max_tokens=max_tokens,
        temperature=d.temperature if turn.temperature is None else turn.temperature,
        top_p=d.top_p if turn.top_p is None else turn.top_p,
        top_k=d.top_k if turn.top_k is None else turn.top_k,
        min_p=d.min_p,
        repetition_penalty=d.repetition_penalty,
        seed=turn.seed,
        stop=turn.stop,
        skip_special_tokens=not parsing.keeps_special_tokens,
        grammar=grammar,
    )
    sampling.validate()
    return ParsedRequest(kind="chat", model=turn.model, prompts=(tuple(ids),), sampling=sampling,
                         stream=turn.stream, cache_salt=turn.cache_salt, priority=turn.priority)
