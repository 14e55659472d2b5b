"""The operator's shared-prefix file (`--shared-prefixes FILE`): its format, read and checked at
start-up, and each declared prefix rendered to token ids by the served model's tokenizer.

    {"prefixes": [
        {"name": "support", "messages": [{"role": "system", "content": "You are Acme's..."}],
         "tools": [{"type": "function", "function": {...}}]},
        {"text": "You are a terse assistant. Answer in one line.\\n"},
        {"token_ids": [1, 887, 526, 263]}
    ]}

Each entry holds exactly one of
- `messages` (+ `tools`): OpenAI chat messages and tools, rendered by the chat template as
  /v1/chat/completions renders a conversation, without the assistant's turn header
  (add_generation_prompt false): it matches chat requests whose messages (and tools) start with
  these. A template that renders the tools elsewhere, or that changes earlier text when more
  messages follow, shares only the tokens that stay equal.
- `text`: tokenized as the completions route tokenizes a prompt (the tokenizer's special tokens,
  e.g. BOS, included): it matches completions prompts that start with this text.
- `token_ids`: the prompt's leading ids themselves.
`name` (optional) labels the entry in the start-up log. What a prefix shares is decided per
request (tandem/kv/shared_prefixes.py): only whole blocks inside it, from the prompt's start.
A file that cannot be read or parsed, no entries, an unknown key, an entry with none or two of
the three, an empty one, or messages a chat request could not send: a ValueError naming the
file and the entry (a usage error at start-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tandem.errors import TandemError
from tandem.tokenization.chat_prompt import ChatRender, render_chat
from tandem.turn.chat_request import normalize_messages, validate_tools

_KINDS = ("messages", "text", "token_ids")
_KEYS = frozenset({*_KINDS, "tools", "name"})


@dataclass(frozen=True)
class SharedPrefixDecl:
    """One declared prefix, checked, not yet tokenized."""

    source: str                              # "FILE prefixes[i]": what errors and the log name
    name: str | None = None
    messages: list[dict] | None = None       # normalized as a chat request's
    tools: list[dict] | None = None
    text: str | None = None
    token_ids: tuple[int, ...] | None = None


def parse_shared_prefixes(raw: str, path: str) -> tuple[SharedPrefixDecl, ...]:
    """The declarations of a file's text (`path` names it in errors)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"--shared-prefixes {path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"prefixes"}:
        raise ValueError(f"--shared-prefixes {path}: must be a JSON object with one key, "
                         '"prefixes": [{"messages": [...]} | {"text": "..."} | {"token_ids": [...]}, ...]')
    entries = doc["prefixes"]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"--shared-prefixes {path}: \"prefixes\" must be a non-empty array")
    return tuple(_entry(e, f"--shared-prefixes {path} prefixes[{i}]") for i, e in enumerate(entries))


def _entry(e: Any, where: str) -> SharedPrefixDecl:
    if not isinstance(e, dict):
        raise ValueError(f"{where}: must be an object")
    unknown = sorted(set(e) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (allowed: {sorted(_KEYS)})")
    kinds = [k for k in _KINDS if k in e]
    if len(kinds) != 1:
        raise ValueError(f"{where}: needs exactly one of {list(_KINDS)}, has {kinds}")
    if "tools" in e and kinds != ["messages"]:
        raise ValueError(f"{where}: \"tools\" go with \"messages\" only")
    name = e.get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"{where}.name: must be a string")
    try:
        if kinds == ["messages"]:
            return SharedPrefixDecl(where, name, messages=normalize_messages(e["messages"]),
                                    tools=validate_tools(e.get("tools"), None))
    except TandemError as exc:
        raise ValueError(f"{where}: {exc.message}") from None
    if kinds == ["text"]:
        if not isinstance(e["text"], str) or not e["text"]:
            raise ValueError(f"{where}.text: must be a non-empty string")
        return SharedPrefixDecl(where, name, text=e["text"])
    ids = e["token_ids"]
    if not isinstance(ids, list) or not ids or \
            not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError(f"{where}.token_ids: must be a non-empty array of token ids (integers >= 0)")
    return SharedPrefixDecl(where, name, token_ids=tuple(ids))


def render_shared_prefix(decl: SharedPrefixDecl, tokenizer: Any) -> tuple[int, ...]:
    """A declaration's token ids, by the served model's tokenizer and chat template."""
    if decl.token_ids is not None:
        return decl.token_ids
    if decl.text is not None:
        return tuple(tokenizer.encode(decl.text, add_special_tokens=True))
    try:
        return tuple(render_chat(tokenizer, decl.messages, decl.tools,
                                 ChatRender(add_generation_prompt=False)))
    except TandemError as exc:
        raise ValueError(f"{decl.source}: {exc.message}") from None
