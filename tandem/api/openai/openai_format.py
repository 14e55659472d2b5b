"""Engine deltas -> OpenAI response bodies and stream chunks (chat and completions).

`OpenAIFormatter` turns the merged (choice index, delta) stream of one HTTP request into
either SSE events or, collected, one response object. Shapes follow OpenAI's API exactly:
chat chunks open with the role and close with an empty delta carrying finish_reason;
with stream_options.include_usage every chunk has "usage": null (the usage so far with vLLM's
continuous_usage_stats) and one last chunk has empty choices and the usage.
A step's tokens get a chunk even when they add no text (a special token, the first bytes of a
character, text held back as a possible stop string): "text" / "content" "", as vLLM sends, so
a client sees the first token when it is made and continuous usage counts every step. Only a
chat output parser (tool calls, reasoning) holding text back sends nothing until it has a part.
"""

from __future__ import annotations

import time
import uuid
import zlib
from dataclasses import dataclass, field

from tandem.api.openai.logprobs_format import (
    TokenTexts,
    chat_logprobs,
    completion_logprobs,
    echoed_logprobs,
    joined_logprobs,
    vllm_prompt_logprobs,
)
from tandem.api.openai.openai_protocol import ParsedRequest
from tandem.api.responses import sse_event
from tandem.parsers import ContentDelta, Event, ReasoningDelta, ToolCall, ToolCallStart
from tandem.turn.chat_output import ChoiceOutput
from tandem.types import RequestDelta, TokenLogprob


def make_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def system_fingerprint(model_name: str) -> str:
    return f"fp_{zlib.crc32(f'tandem/{model_name}'.encode()):08x}"


def tool_calls_json(calls: list[ToolCall]) -> list[dict]:
    """OpenAI's message.tool_calls (arguments: a JSON text)."""
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls]


def chat_deltas(events: list[Event]) -> list[dict]:
    """Parser events -> OpenAI chat deltas, runs of one kind merged: {"content"},
    {"reasoning_content"}, a call's start {"tool_calls": [{index, id, type, function: {name,
    arguments: ""}}]}, then its argument fragments {"tool_calls": [{index, function: {arguments}}]}."""
    out: list[dict] = []
    for ev in events:
        if isinstance(ev, ToolCallStart):
            out.append({"tool_calls": [{"index": ev.index, "id": ev.id, "type": "function",
                                        "function": {"name": ev.name, "arguments": ""}}]})
            continue
        if isinstance(ev, (ContentDelta, ReasoningDelta)):
            key = "content" if isinstance(ev, ContentDelta) else "reasoning_content"
            if out and set(out[-1]) == {key}:
                out[-1][key] += ev.text
            else:
                out.append({key: ev.text})
            continue
        last = out[-1]["tool_calls"][0] if out and set(out[-1]) == {"tool_calls"} else None
        if last is not None and last["index"] == ev.index and "id" not in last:
            last["function"]["arguments"] += ev.fragment
        else:
            out.append({"tool_calls": [{"index": ev.index, "function": {"arguments": ev.fragment}}]})
    return out


def usage_dict(prompt: int, completion: int, cached: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


@dataclass
class _Choice:
    texts: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0      # counted from deltas
    final_output_tokens: int = 0  # as the final delta reports it
    text_offset: int = 0        # completions logprobs, streaming
    prompt_logprobs: list[TokenLogprob] | None = None  # prompt tokens 1.. scored
    output: ChoiceOutput | None = None  # chat with parsers: the choice's parser


class OpenAIFormatter:
    """State of one chat or completions response across its deltas."""

    def __init__(self, parsed: ParsedRequest, request_id: str, fingerprint: str,
                 texts: TokenTexts) -> None:
        self.p = parsed
        self.chat = parsed.kind == "chat"
        self.id = request_id
        self.created = int(time.time())
        self.fingerprint = fingerprint
        self.texts = texts
        self.choices = [_Choice() for _ in range(len(parsed.prompts) * parsed.n)]
        if self.chat and parsed.output is not None:
            for i, c in enumerate(self.choices):
                c.output = parsed.output.stream(request_id, i)

    # -- shared bookkeeping -------------------------------------------------
    def _record(self, i: int, d: RequestDelta) -> _Choice:
        c = self.choices[i]
        if d.num_prompt_tokens:
            c.prompt_tokens = d.num_prompt_tokens
            c.cached_tokens = d.num_cached_tokens
        c.output_tokens += len(d.new_token_ids)
        if d.prompt_logprobs is not None:
            c.prompt_logprobs = d.prompt_logprobs
        if d.finished:
            c.finish_reason = d.finish_reason.value if d.finish_reason else "stop"
            c.final_output_tokens = d.num_output_tokens
        return c

    @staticmethod
    def _finish_reason(c: _Choice) -> str | None:
        """A response that ended normally after calling tools ends with "tool_calls"."""
        if c.finish_reason == "stop" and c.output is not None and c.output.num_tool_calls:
            return "tool_calls"
        return c.finish_reason

    def usage(self) -> dict:
        """Prompt tokens count once per prompt (choice j = 0), completions for every choice."""
        n = self.p.n
        firsts = self.choices[::n]
        prompt = sum(c.prompt_tokens or len(ids) for c, ids in zip(firsts, self.p.prompts))
        cached = sum(c.cached_tokens for c in firsts)
        completion = sum(c.final_output_tokens or c.output_tokens for c in self.choices)
        return usage_dict(prompt, completion, cached)

    # -- streaming ------------------------------------------------------------
    def _chunk(self, choices: list[dict]) -> dict:
        chunk = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                 "created": self.created, "model": self.p.model,
                 "system_fingerprint": self.fingerprint, "choices": choices}
        if self.p.include_usage:  # the usage so far with continuous_usage_stats, else only at the end
            chunk["usage"] = self.usage() if self.p.continuous_usage else None
        return chunk

    def _echo(self, i: int) -> str:
        """The prompt text a completions choice starts with when echo was asked for, else ""."""
        return self.p.echo[i // self.p.n] if self.p.echo else ""

    def _echoed_logprobs(self, i: int) -> tuple[dict, int]:
        """Completions logprobs of choice i's echoed prompt, and the text offset after it."""
        c = self.choices[i]
        return echoed_logprobs(self.p.prompts[i // self.p.n], c.prompt_logprobs or [], self.texts,
                               self.p.sampling.logprobs)

    def _vllm_prompt_logprobs(self, i: int) -> list | None:
        scored = self.choices[i].prompt_logprobs
        if self.p.prompt_logprobs is None or scored is None:
            return None
        return vllm_prompt_logprobs(scored, self.texts, self.p.prompt_logprobs)

    def stream_start(self) -> bytes:
        """Chat opens every choice with the assistant role; completions send their echoed
        prompt, if any."""
        if not self.chat:  # an echo with logprobs waits for the scored prompt (first delta)
            return b"".join(sse_event(self._chunk([
                {"index": i, "text": self._echo(i), "logprobs": None, "finish_reason": None}]))
                for i in range(len(self.choices)) if self._echo(i) and not self.p.echo_logprobs)
        return b"".join(sse_event(self._chunk([
            {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}])) for i in range(len(self.choices)))

    def stream_delta(self, i: int, d: RequestDelta) -> bytes:
        c = self._record(i, d)
        has_lp = self.p.logprobs and bool(d.logprobs)
        events = []
        prompt_lp = self._vllm_prompt_logprobs(i) if d.prompt_logprobs is not None else None
        if self.chat:
            if c.output is None:   # a token without text (a special token, part of a character): ""
                deltas = [{"content": d.new_text}] if d.new_text or d.new_token_ids else []
            else:
                deltas = chat_deltas(c.output.feed(d.new_text)
                                     + (c.output.finish() if d.finished else []))
            if (has_lp or prompt_lp is not None) and not deltas:
                deltas = [{}]   # the logprobs of tokens whose text the parser holds back
            for k, delta in enumerate(deltas):
                lp = {"content": chat_logprobs(d.logprobs, self.texts)} if has_lp and k == 0 else None
                chunk = self._chunk([{"index": i, "delta": delta, "logprobs": lp,
                                      "finish_reason": None}])
                if prompt_lp is not None and k == 0:
                    chunk["prompt_logprobs"] = prompt_lp
                events.append(sse_event(chunk))
            if d.finished:
                events.append(sse_event(self._chunk([{"index": i, "delta": {}, "logprobs": None,
                                                      "finish_reason": self._finish_reason(c)}])))
        else:
            if self.p.echo_logprobs and d.prompt_logprobs is not None:
                echo_lp, c.text_offset = self._echoed_logprobs(i)
                events.append(sse_event(self._chunk([{"index": i, "text": self._echo(i),
                                                      "logprobs": echo_lp, "finish_reason": None}])))
            if d.new_text or d.new_token_ids or has_lp or d.finished or prompt_lp is not None:
                lp = None
                if has_lp:
                    lp, c.text_offset = completion_logprobs(d.logprobs, self.texts, c.text_offset)
                choice = {"index": i, "text": d.new_text, "logprobs": lp,
                          "finish_reason": c.finish_reason}
                if prompt_lp is not None:
                    choice["prompt_logprobs"] = prompt_lp
                events.append(sse_event(self._chunk([choice])))
        return b"".join(events)

    def stream_end(self) -> bytes:
        if not self.p.include_usage:
            return b""
        chunk = self._chunk([])
        chunk["usage"] = self.usage()
        return sse_event(chunk)

    # -- one response object ----------------------------------------------------
    def add(self, i: int, d: RequestDelta) -> None:
        c = self._record(i, d)
        if d.new_text:
            c.texts.append(d.new_text)
        if self.p.logprobs and d.logprobs:
            c.logprobs.extend(d.logprobs)

    def _message(self, c: _Choice, text: str) -> dict:
        """The assistant message: content (null when only calls came, as OpenAI), the calls, and
        with a reasoning parser reasoning_content."""
        if c.output is None:
            return {"role": "assistant", "content": text, "refusal": None}
        c.output.feed(text)
        c.output.finish()
        out = c.output.result()
        msg: dict = {"role": "assistant", "content": out.content if out.tool_calls else out.content or "",
                     "refusal": None}
        if out.tool_calls:
            msg["tool_calls"] = tool_calls_json(out.tool_calls)
        if self.p.output is not None and self.p.output.parses_reasoning:
            msg["reasoning_content"] = out.reasoning
        return msg

    def response(self) -> dict:
        choices = []
        for i, c in enumerate(self.choices):
            text = "".join(c.texts)
            if self.chat:
                lp = {"content": chat_logprobs(c.logprobs, self.texts)} if self.p.logprobs else None
                message = self._message(c, text)   # parses: the finish reason depends on the calls
                choices.append({"index": i, "message": message, "logprobs": lp,
                                "finish_reason": self._finish_reason(c)})
                continue
            lp = None
            if self.p.echo_logprobs:
                echo_lp, offset = self._echoed_logprobs(i)
                lp = joined_logprobs(echo_lp, completion_logprobs(c.logprobs, self.texts, offset)[0])
            elif self.p.logprobs:
                lp = completion_logprobs(c.logprobs, self.texts, 0)[0]
            choice = {"index": i, "text": self._echo(i) + text, "logprobs": lp,
                      "finish_reason": c.finish_reason}
            if self.p.prompt_logprobs is not None:
                choice["prompt_logprobs"] = self._vllm_prompt_logprobs(i)
            choices.append(choice)
        body = {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.p.model,
                "system_fingerprint": self.fingerprint, "choices": choices, "usage": self.usage()}
        if self.chat and self.p.prompt_logprobs is not None:
            body["prompt_logprobs"] = self._vllm_prompt_logprobs(0)  # one prompt per chat request
        return body
