"""OpenAI request bodies -> what the engine needs (prompt token ids, SamplingParams, options).

Pure functions of (body, ParseContext): no I/O, so the gateway parses exactly like a worker.
Every bad value raises a TandemError naming its param (400), an unknown model 404, a prompt
that leaves no room to generate a 400 with code context_length_exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tandem.errors import ModelNotFound, NotSupportedYet, PromptTooLong
from tandem.tokenization.chat_prompt import render_chat
from tandem.turn.chat_output import ChatOutputSpec
from tandem.turn.chat_plan import ChatPlan, plan_chat
from tandem.turn.chat_request import chat_render, normalize_messages
from tandem.turn.agent_hint import read_agent
from tandem.turn.fields import Fields, bad
from tandem.turn.parser_setup import ParserSetup
from tandem.turn.sampling_defaults import SamplingDefaults
from tandem.turn.structured_output import read_structured_output
from tandem.turn.tool_request import read_tools
from tandem.types import EngineRequest, GrammarSpec, ParserOptions, RequestContext, SamplingParams

_SEED_MIN, _SEED_MAX = -(2**63), 2**63 - 1
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class ParseContext:
    """What parsing needs to know about the server."""

    served_name: str
    tokenizer: Any          # tandem.tokenization.tokenizer.Tokenizer (or anything with its methods)
    max_model_len: int
    max_n: int = 128
    max_prompts: int = 64
    defaults: SamplingDefaults = SamplingDefaults()  # what a request leaves out (the model's advice)
    parsers: ParserSetup = ParserSetup()   # output parsers (tool calls, reasoning); none by default


@dataclass(frozen=True)
class ParsedRequest:
    """One validated HTTP request: len(prompts) * n engine requests."""

    kind: str                          # "chat" | "completion"
    model: str                         # as the client named it (echoed in responses)
    prompts: tuple[tuple[int, ...], ...]  # prompt token ids, one tuple per prompt
    sampling: SamplingParams           # shared by every engine request (seed varies with n)
    n: int = 1
    stream: bool = False
    include_usage: bool = False        # stream_options.include_usage
    continuous_usage: bool = False     # stream_options.continuous_usage_stats (vLLM): usage in every chunk
    cache_salt: str | None = None      # vLLM's cache_salt: KV is shared only within one salt
    priority: int = 0                  # vLLM's priority: any integer, lower is scheduled first
    user: str | None = None
    echo: tuple[str, ...] = ()         # completions with echo: each prompt's text, put before its outputs
    prompt_logprobs: int | None = None  # vLLM's prompt_logprobs: the scored prompt in its own field
    output: ChatOutputSpec | None = None  # chat: how each choice's text is parsed (None: as it is)
    grammar_param: str | None = None   # the field sampling.grammar came from (names its 400)
    parser_options: ParserOptions = ParserOptions()  # the parsers that run, for the RequestContext
    expect_next_turn_s: float | None = None  # body `agent.expect_next_turn_s` (turn/agent_hint.py)

    @property
    def logprobs(self) -> bool:
        return self.sampling.logprobs is not None

    @property
    def echo_logprobs(self) -> bool:
        """Completions with echo and logprobs: each choice's logprobs start with its prompt's."""
        return bool(self.echo) and self.logprobs

    def engine_requests(self, base_id: str, context: RequestContext) -> list[EngineRequest]:
        """Engine requests in choice order: choice index = prompt index * n + j, each carrying
        the HTTP request's `context`.

        With a seed and n > 1, choice j uses seed + j: reproducible, yet not n copies.
        """
        out = []
        for p, ids in enumerate(self.prompts):
            for j in range(self.n):
                sp = self.sampling
                if sp.seed is not None and j:
                    sp = replace(sp, seed=_wrap_seed(sp.seed + j))
                out.append(EngineRequest(request_id=f"{base_id}-{p * self.n + j}",
                                         prompt_token_ids=list(ids), sampling=sp,
                                         context=context))
        return out


def _wrap_seed(seed: int) -> int:
    return (seed - _SEED_MIN) % 2**64 + _SEED_MIN


def check_model(body: Fields, served_name: str) -> str:
    model = body.str("model")
    if model is None:  # as vLLM: the served model
        return served_name
    if model != served_name:
        raise ModelNotFound(f"The model '{model}' does not exist; this server serves "
                            f"'{served_name}'", param="model")
    return model


def parse_chat(body: dict, ctx: ParseContext) -> ParsedRequest:
    f = Fields(body)
    model = check_model(f, ctx.served_name)
    _refuse_unsupported(f)
    if f.bool("echo", False):
        raise NotSupportedYet("echo", "in chat requests")
    tools = read_tools(f)
    structured, structured_param = read_structured_output(f)
    messages = normalize_messages(f.raw("messages"))
    ids = render_chat(ctx.tokenizer, messages, tools.tools, chat_render(f))
    check_prompt_fits(ids, ctx, "messages")
    plan = plan_chat(ctx.parsers, tools, structured, structured_param, prompt_tail(ctx, ids))

    top = f.int("top_logprobs", None, 0, MAX_LOGPROBS)
    want = f.bool("logprobs", False)
    if top and not want:
        raise bad("top_logprobs", "requires 'logprobs': true")
    logprobs = (top or 0) if want else None

    max_tokens = f.int("max_completion_tokens", None, 1)
    if max_tokens is None:
        max_tokens = f.int("max_tokens", None, 1)
    if max_tokens is None:  # OpenAI's chat default: whatever room the context leaves
        max_tokens = ctx.max_model_len - len(ids)
        if ctx.defaults.max_tokens is not None:
            max_tokens = min(max_tokens, ctx.defaults.max_tokens)
    return with_plan(_finish(f, "chat", model, (tuple(ids),), ctx, max_tokens, logprobs), plan)


def prompt_tail(ctx: ParseContext, ids: list[int], tokens: int = 32) -> str:
    """The end of a rendered prompt as text, special tokens included (an open think block shows)."""
    return ctx.tokenizer.decode(ids[-tokens:], skip_special_tokens=False)


def with_plan(parsed: ParsedRequest, plan: ChatPlan) -> ParsedRequest:
    """A parsed chat request with its tool and structured-output plan applied."""
    sampling = replace(parsed.sampling, grammar=plan.grammar,
                       skip_special_tokens=parsed.sampling.skip_special_tokens and not plan.keep_special_tokens)
    return replace(parsed, sampling=sampling, output=plan.output, grammar_param=plan.grammar_param,
                   parser_options=plan.parser_options)


def parse_completion(body: dict, ctx: ParseContext) -> ParsedRequest:
    f = Fields(body)
    model = check_model(f, ctx.served_name)
    _refuse_unsupported(f)
    if f.has("suffix"):
        raise NotSupportedYet("suffix")
    prompts = _completion_prompts(f.raw("prompt"), ctx)
    if len(prompts) > ctx.max_prompts:
        raise bad("prompt", f"holds {len(prompts)} prompts; at most {ctx.max_prompts} allowed")
    for ids in prompts:
        check_prompt_fits(ids, ctx, "prompt")
    logprobs = f.int("logprobs", None, 0, MAX_LOGPROBS)
    echo = f.bool("echo", False)
    max_tokens = f.int("max_tokens", 16, 1)  # OpenAI's completions default
    grammar, grammar_param = read_structured_output(f)
    parsed = _finish(f, "completion", model, tuple(tuple(p) for p in prompts), ctx,
                     max_tokens, logprobs, echo_logprobs=echo, grammar=grammar)
    parsed = replace(parsed, grammar_param=grammar_param)
    if not echo:
        return parsed
    return replace(parsed, echo=tuple(_prompt_texts(f.raw("prompt"), prompts, ctx)))


# vLLM request fields that would change the output and that tandem does not implement:
# refused, never silently ignored.
_UNSUPPORTED_VLLM_FIELDS = ("bad_words", "allowed_token_ids", "truncate_prompt_tokens")


def _refuse_unsupported(f: Fields) -> None:
    best_of = f.int("best_of", None, 1)
    if best_of is not None and best_of != f.int("n", 1):
        raise NotSupportedYet("best_of", "other than n")
    for key in _UNSUPPORTED_VLLM_FIELDS:
        if f.raw(key) not in (None, [], {}, ""):
            raise NotSupportedYet(key)
    if f.bool("return_tokens_as_token_ids", False):
        raise NotSupportedYet("return_tokens_as_token_ids")


def _completion_prompts(raw: Any, ctx: ParseContext) -> list[list[int]]:
    """prompt: a string, a list of strings, a list of token ids, or a list of such lists."""
    if isinstance(raw, str):
        return [_encode(ctx, raw, "prompt")]
    if not isinstance(raw, list) or not raw:
        raise bad("prompt", "must be a string, an array of strings, or token ids")
    if all(_is_int(t) for t in raw):
        return [_token_ids(raw, ctx, "prompt")]
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            out.append(_encode(ctx, item, f"prompt[{i}]"))
        elif isinstance(item, list) and item and all(_is_int(t) for t in item):
            out.append(_token_ids(item, ctx, f"prompt[{i}]"))
        else:
            raise bad(f"prompt[{i}]", "must be a string or a non-empty array of token ids")
    return out


def _prompt_texts(raw: Any, prompts: list[list[int]], ctx: ParseContext) -> list[str]:
    """The text of each prompt as the client gave it; token-id prompts decoded."""
    items = [raw] if isinstance(raw, str) or all(_is_int(t) for t in raw) else raw
    return [item if isinstance(item, str) else ctx.tokenizer.decode(ids, skip_special_tokens=False)
            for item, ids in zip(items, prompts)]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _encode(ctx: ParseContext, text: str, param: str) -> list[int]:
    ids = list(ctx.tokenizer.encode(text, add_special_tokens=True))
    if not ids:
        raise bad(param, "must not be empty")
    return ids


def _token_ids(ids: list[int], ctx: ParseContext, param: str) -> list[int]:
    vocab = ctx.tokenizer.vocab_size
    for t in ids:
        if not 0 <= t < vocab:
            raise bad(param, f"contains token id {t}, outside the vocabulary [0, {vocab})")
    return list(ids)


def check_prompt_fits(ids: list[int], ctx: ParseContext, param: str) -> None:
    """A prompt must leave room for one token at least; the error reads as vLLM's."""
    if len(ids) >= ctx.max_model_len:
        what = "input messages" if param == "messages" else param
        raise PromptTooLong(
            f"This model's maximum context length is {ctx.max_model_len} tokens. However, your "
            f"request has {len(ids)} input tokens. Please reduce the length of the {what}.",
            param=param)


def _finish(f: Fields, kind: str, model: str, prompts: tuple[tuple[int, ...], ...],
            ctx: ParseContext, max_tokens: int, logprobs: int | None,
            echo_logprobs: bool = False, grammar: GrammarSpec | None = None) -> ParsedRequest:
    """The fields chat and completions share. `echo_logprobs`: the prompt is echoed, with
    logprobs if `logprobs` is set, which then needs its tokens scored as well."""
    n = f.int("n", 1, 1, ctx.max_n)
    stream = f.bool("stream", False)
    include_usage = continuous_usage = False
    opts = f.obj("stream_options")
    if opts is not None:
        if not stream:
            raise bad("stream_options", "is only allowed when 'stream' is true")
        include_usage = opts.bool("include_usage", False)
        continuous_usage = opts.bool("continuous_usage_stats", False) and include_usage  # as vLLM
    d = ctx.defaults
    top_k = f.int("top_k", d.top_k, -1)
    vocab = ctx.tokenizer.vocab_size
    prompt_logprobs = f.int("prompt_logprobs", None, 0, MAX_LOGPROBS)
    scored = [k for k in (prompt_logprobs, logprobs if echo_logprobs else None) if k is not None]
    sampling = SamplingParams(
        max_tokens=max_tokens,
        temperature=f.float("temperature", d.temperature, 0.0, 2.0),
        top_p=f.float("top_p", d.top_p),
        top_k=0 if top_k == -1 else top_k,  # vLLM spells "off" as -1
        min_p=f.float("min_p", d.min_p),
        seed=f.int("seed", None, _SEED_MIN, _SEED_MAX),
        presence_penalty=f.float("presence_penalty", 0.0),
        frequency_penalty=f.float("frequency_penalty", 0.0),
        repetition_penalty=f.float("repetition_penalty", d.repetition_penalty),
        stop=f.str_or_list("stop"),
        stop_token_ids=f.int_list("stop_token_ids", 0, vocab - 1),
        ignore_eos=f.bool("ignore_eos", False),
        min_tokens=f.int("min_tokens", 0, 0),
        logprobs=logprobs,
        include_stop_str_in_output=f.bool("include_stop_str_in_output", False),
        skip_special_tokens=f.bool("skip_special_tokens", True),
        logit_bias=f.token_biases("logit_bias", vocab),
        prompt_logprobs=max(scored) if scored else None,
        grammar=grammar,
    )
    if sampling.min_tokens > sampling.max_tokens:
        raise bad("min_tokens", f"must not exceed max_tokens ({sampling.max_tokens})")
    sampling.validate()
    return ParsedRequest(kind=kind, model=model, prompts=prompts, sampling=sampling, n=n,
                         stream=stream, include_usage=include_usage,
                         continuous_usage=continuous_usage, prompt_logprobs=prompt_logprobs,
                         cache_salt=f.str("cache_salt", nonempty=True), priority=f.int("priority", 0),
                         user=f.str("user"), expect_next_turn_s=read_agent(f))
