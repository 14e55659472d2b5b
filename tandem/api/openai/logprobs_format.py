"""Logprobs in the API's shapes: OpenAI chat and completions, and vLLM's prompt_logprobs.

Logprobs of -inf are written as -9999.0 (JSON has no infinity; OpenAI clients expect a number).
"""

from __future__ import annotations

import re

from tandem.types import TokenLogprob

_MIN_LOGPROB = -9999.0


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


def completion_logprobs(lps: list[TokenLogprob], texts: TokenTexts, offset: int,
                        limit: int | None = None) -> tuple[dict, int]:
    """Completions shape {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; returns
    it and the text offset after these tokens. `limit`: at most that many top entries."""
    tokens, values, tops, offsets = [], [], [], []
    for lp in lps:
        tok = texts(lp.token_id)
        tokens.append(tok)
        values.append(_lp(lp.logprob))
        top = {texts(tid): _lp(v) for tid, v in lp.top[:limit]}
        top.setdefault(tok, _lp(lp.logprob))
        tops.append(top)
        offsets.append(offset)
        offset += len(tok)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
            "text_offset": offsets}, offset


def echoed_logprobs(prompt_ids: tuple[int, ...], scored: list[TokenLogprob], texts: TokenTexts,
                    limit: int) -> tuple[dict, int]:
    """Completions shape of an echoed prompt: its first token has no logprob (null), the
    others are `scored` (prompt tokens 1..). Returns it and the text offset after the prompt."""
    first = texts(prompt_ids[0])
    rest, offset = completion_logprobs(scored, texts, len(first), limit)
    return {"tokens": [first, *rest["tokens"]], "token_logprobs": [None, *rest["token_logprobs"]],
            "top_logprobs": [None, *rest["top_logprobs"]],
            "text_offset": [0, *rest["text_offset"]]}, offset


def joined_logprobs(a: dict, b: dict) -> dict:
    """Two completions-shape logprobs one after the other (offsets already continued)."""
    return {key: a[key] + b[key] for key in a}


def vllm_prompt_logprobs(scored: list[TokenLogprob], texts: TokenTexts, limit: int) -> list:
    """vLLM's prompt_logprobs: None for the first prompt token, then per token
    {token id: {"logprob", "rank", "decoded_token"}} for the prompt's token and the top `limit`."""
    out: list = [None]
    for lp in scored:
        entry = {str(lp.token_id): {"logprob": _lp(lp.logprob), "rank": lp.rank,
                                    "decoded_token": texts(lp.token_id)}}
        for rank, (tid, v) in enumerate(lp.top[:limit], 1):
            entry.setdefault(str(tid), {"logprob": _lp(v), "rank": rank, "decoded_token": texts(tid)})
        out.append(entry)
    return out
