"""A chat request's messages, tools and render options, read and checked from its JSON body.

Shared by the OpenAI and Workers AI routes and the tokenize route; rendering them into prompt
token ids is tandem/tokenization/chat_prompt.py.
"""

from __future__ import annotations

from typing import Any

import orjson

from tandem.errors import NotSupportedYet
from tandem.tokenization.chat_prompt import ChatRender
from tandem.turn.fields import Fields, bad
from tandem.turn.tool_request import read_tools

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Names an assistant message's reasoning goes by: Qwen3's templates read reasoning_content,
# gpt-oss's thinking; OpenAI-compatible clients may send reasoning.
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
# Keys of chat_template_kwargs that would clash with the template call itself.
_RESERVED_TEMPLATE_KWARGS = frozenset({"messages", "conversation", "tools", "tokenize",
                                       "add_generation_prompt", "continue_final_message"})


def chat_render(f: Fields) -> ChatRender:
    """The render options of a request body."""
    cont = f.bool("continue_final_message", False)
    add = f.bool("add_generation_prompt", not cont)
    if cont and add:
        raise bad("continue_final_message", "cannot be combined with 'add_generation_prompt': true")
    return ChatRender(add, cont, template_kwargs(f.raw("chat_template_kwargs")))


def normalize_messages(raw: Any, param: str = "messages") -> list[dict]:
    """OpenAI messages -> what HF chat templates expect.

    Content given as parts stays a list of text parts (render_chat joins them unless the
    template reads parts); "developer" becomes "system"; tool call arguments given as a JSON
    string become the value it holds, and missing or empty ones `{}` (as vLLM does: templates
    render them with tojson); arguments that are not JSON are a 400.
    As transformers does: fields sent as null are left out (clients echo assistant messages
    back with "tool_calls": null, which templates testing `is defined` would take for calls),
    and an assistant's reasoning is given under each name templates read it by.
    """
    if not isinstance(raw, list) or not raw:
        raise bad(param, "must be a non-empty array of messages")
    out = []
    for i, msg in enumerate(raw):
        p = f"{param}[{i}]"
        if not isinstance(msg, dict):
            raise bad(p, "must be an object with 'role' and 'content'")
        role = msg.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise bad(f"{p}.role", f"must be one of {sorted(_ROLES)}, got {role!r}")
        norm = {k: v for k, v in msg.items() if v is not None}
        norm["role"] = "system" if role == "developer" else role
        reasoning = next((msg[k] for k in _REASONING_KEYS if isinstance(msg.get(k), str)), None)
        if reasoning is not None:
            norm.setdefault("reasoning_content", reasoning)
            norm.setdefault("thinking", reasoning)
        norm["content"] = _content(msg.get("content"), role, f"{p}.content")
        if msg.get("tool_calls") is not None:
            norm["tool_calls"] = _tool_calls(msg["tool_calls"], f"{p}.tool_calls")
        out.append(norm)
    return out


def _content(content: Any, role: str, param: str) -> str | list[dict]:
    """A string, or the text parts [{"type": "text", "text": ...}] (anything else refused)."""
    if isinstance(content, str):
        return content
    if content is None:
        if role == "assistant":  # OpenAI: an assistant turn may hold only tool calls, or a refusal
            return ""
        raise bad(param, "is required")
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise bad(f"{param}[{k}]", "must be an object with a 'type'")
            # an assistant's refusal, echoed back by the client, is text the model said
            key = "refusal" if part["type"] == "refusal" and role == "assistant" else "text"
            if part["type"] != key:
                raise NotSupportedYet(f"{param}[{k}]", f"of type {part['type']!r}")
            if not isinstance(part.get(key), str):
                raise bad(f"{param}[{k}].{key}", "must be a string")
            parts.append({"type": "text", "text": part[key]})
        return parts
    raise bad(param, "must be a string or an array of content parts")


def _tool_calls(calls: Any, param: str) -> list[dict]:
    if not isinstance(calls, list):
        raise bad(param, "must be an array")
    out = []
    for k, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(f"{param}[{k}].function", "must be an object with a 'name'")
        args = fn.get("arguments")
        if not args:
            args = {}
        elif isinstance(args, str):
            try:
                args = orjson.loads(args)
            except orjson.JSONDecodeError:
                raise bad(f"{param}[{k}].function.arguments", "must be a JSON text") from None
        out.append({**call, "function": {**fn, "arguments": args}})
    return out


def validate_tools(raw: Any, tool_choice: Any) -> list[dict] | None:
    """The tools list for the chat template, or None (tool_request.py checks them)."""
    return read_tools(Fields({"tools": raw, "tool_choice": tool_choice})).tools


def template_kwargs(raw: Any) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad("chat_template_kwargs", "must be an object")
    clash = sorted(_RESERVED_TEMPLATE_KWARGS & raw.keys())
    if clash:
        raise bad("chat_template_kwargs", f"must not set {clash} (top-level request fields)")
    return raw
