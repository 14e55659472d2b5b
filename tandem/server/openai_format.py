"""Engine deltas -> OpenAI response bodies and stream chunks (chat and completions).

`OpenAIFormatter` turns the merged (choice index, delta) stream of one HTTP request into
either SSE events or, collected, one response object. Shapes follow OpenAI's API exactly:
chat chunks open with the role and close with an empty delta carrying finish_reason;
with stream_options.include_usage every chunk has "usage": null (the usage so far with vLLM's
continuous_usage_stats) and one last chunk has empty choices and the usage.
"""

from __future__ import annotations

import re
import time
import uuid
import zlib
from dataclasses import dataclass, field

from tandem.server.openai_protocol import ParsedRequest
from tandem.server.responses import sse_event
from tandem.types import RequestDelta, TokenLogprob

_MIN_LOGPROB = -9999.0  # JSON has no -inf; OpenAI clients expect a number


def make_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def system_fingerprint(model_name: str) -> str:
    return f"fp_{zlib.crc32(f'tandem/{model_name}'.encode()):08x}"


def _byte_level_decoder() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2 and its descendants): each byte is one printable char.
    Printable latin-1 bytes stand for themselves; the others are shifted to 256 and up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # sentencepiece byte tokens


class TokenTexts:
    """Display text and bytes of single tokens (for logprobs), cached, at most `capacity`.

    A token that is only part of a UTF-8 character decodes to U+FFFD; for those the raw
    bytes come from the token's vocabulary entry and the text reads "bytes:\\xe2\\x80",
    as OpenAI shows them.
    """

    def __init__(self, tokenizer, capacity: int = 65536) -> None:
        self._tok = tokenizer
        self._cache: dict[int, tuple[str, list[int]]] = {}
        self._capacity = capacity
        self._byte_level = _byte_level_decoder()

    def __call__(self, token_id: int) -> str:
        return self.entry(token_id)[0]

    def entry(self, token_id: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token_id)
        if hit is None:
            if len(self._cache) >= self._capacity:
                self._cache.clear()
            hit = self._cache[token_id] = self._lookup(token_id)
        return hit

    def _lookup(self, token_id: int) -> tuple[str, list[int]]:
        text = self._tok.decode([token_id], skip_special_tokens=False)
        if "\ufffd" not in text:
            return text, list(text.encode())
        raw = self._raw_bytes(token_id)
        if raw is None:
            return text, list(text.encode())
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw), raw

    def _raw_bytes(self, token_id: int) -> list[int] | None:
        (piece,) = self._tok.convert_ids_to_tokens([token_id])
        if not piece:
            return None
        m = _BYTE_FALLBACK.fullmatch(piece)
        if m:
            return [int(m.group(1), 16)]
        if all(ch in self._byte_level for ch in piece):
            return [self._byte_level[ch] for ch in piece]
        return None


def _lp(value: float) -> float:
    return value if value > _MIN_LOGPROB else _MIN_LOGPROB


def chat_logprobs(lps: list[TokenLogprob], texts: TokenTexts) -> list[dict]:
    """Chat shape: [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]."""
    out = []
    for lp in lps:
        tok, raw = texts.entry(lp.token_id)
        top = []
        for tid, v in lp.top:
            t, b = texts.entry(tid)
            top.append({"token": t, "logprob": _lp(v), "bytes": b})
        out.append({"token": tok, "logprob": _lp(lp.logprob), "bytes": raw, "top_logprobs": top})
    return out


def completion_logprobs(lps: list[TokenLogprob], texts: TokenTexts, offset: int) -> tuple[dict, int]:
    """Completions shape {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; returns
    it and the text offset after these tokens."""
    tokens, values, tops, offsets = [], [], [], []
    for lp in lps:
        tok = texts(lp.token_id)
        tokens.append(tok)
        values.append(_lp(lp.logprob))
        top = {texts(tid): _lp(v) for tid, v in lp.top}
        top.setdefault(tok, _lp(lp.logprob))
        tops.append(top)
        offsets.append(offset)
        offset += len(tok)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
            "text_offset": offsets}, offset


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

    # -- shared bookkeeping -------------------------------------------------
    def _record(self, i: int, d: RequestDelta) -> _Choice:
        c = self.choices[i]
        if d.num_prompt_tokens:
            c.prompt_tokens = d.num_prompt_tokens
            c.cached_tokens = d.num_cached_tokens
        c.output_tokens += len(d.new_token_ids)
        if d.finished:
            c.finish_reason = d.finish_reason.value if d.finish_reason else "stop"
            c.final_output_tokens = d.num_output_tokens
        return c

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

    def stream_start(self) -> bytes:
        """Chat opens every choice with the assistant role; completions send their echoed
        prompt, if any."""
        if not self.chat:
            return b"".join(sse_event(self._chunk([
                {"index": i, "text": self._echo(i), "logprobs": None, "finish_reason": None}]))
                for i in range(len(self.choices)) if self._echo(i))
        return b"".join(sse_event(self._chunk([
            {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}])) for i in range(len(self.choices)))

    def stream_delta(self, i: int, d: RequestDelta) -> bytes:
        c = self._record(i, d)
        has_lp = self.p.logprobs and bool(d.logprobs)
        events = []
        if self.chat:
            if d.new_text or has_lp:
                lp = {"content": chat_logprobs(d.logprobs, self.texts)} if has_lp else None
                events.append(sse_event(self._chunk([{"index": i, "delta": {"content": d.new_text},
                                                      "logprobs": lp, "finish_reason": None}])))
            if d.finished:
                events.append(sse_event(self._chunk([{"index": i, "delta": {}, "logprobs": None,
                                                      "finish_reason": c.finish_reason}])))
        elif d.new_text or has_lp or d.finished:
            lp = None
            if has_lp:
                lp, c.text_offset = completion_logprobs(d.logprobs, self.texts, c.text_offset)
            events.append(sse_event(self._chunk([{"index": i, "text": d.new_text, "logprobs": lp,
                                                  "finish_reason": c.finish_reason}])))
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

    def response(self) -> dict:
        choices = []
        for i, c in enumerate(self.choices):
            text = "".join(c.texts)
            if self.chat:
                lp = {"content": chat_logprobs(c.logprobs, self.texts)} if self.p.logprobs else None
                choices.append({"index": i, "message": {"role": "assistant", "content": text,
                                                        "refusal": None},
                                "logprobs": lp, "finish_reason": c.finish_reason})
            else:
                lp = completion_logprobs(c.logprobs, self.texts, 0)[0] if self.p.logprobs else None
                choices.append({"index": i, "text": self._echo(i) + text, "logprobs": lp,
                                "finish_reason": c.finish_reason})
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.p.model,
                "system_fingerprint": self.fingerprint, "choices": choices, "usage": self.usage()}
