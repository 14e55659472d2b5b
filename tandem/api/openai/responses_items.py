"""Responses API items <-> OpenAI chat messages (what the chat template renders).

Input items, and a stored response's output items (they are valid input items too):
- a message `{"role", "content"}` (`"type": "message"` optional); content a string or parts:
  `input_text` / `output_text` (text), `refusal` (an assistant's text); images and files refused;
- `{"type": "function_call", "call_id", "name", "arguments"}`: a call the assistant made; calls
  join the assistant message right before them, so one assistant turn holds text and its calls;
- `{"type": "function_call_output", "call_id", "output"}`: a `role: tool` message answering it
  (named after its call when the call is in the conversation);
- `{"type": "reasoning", "content": [{"type": "reasoning_text", "text"}]}`: the reasoning of the
  next assistant message (`reasoning_content`, as chat templates read it); summaries are dropped.
Every bad item is a 400 naming its place, e.g. `input[2].call_id`.
"""

from __future__ import annotations

from typing import Any

from tandem.errors import NotSupportedYet
from tandem.turn.fields import bad

_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "text")
_UNSUPPORTED_PARTS = ("input_image", "input_file", "input_audio")


def input_messages(raw: Any, param: str = "input") -> list[dict]:
    """Responses `input` (a string or a list of items) -> chat messages."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad(param, "must be a string or a non-empty array of input items")
    return items_to_messages(raw, param)


def items_to_messages(items: list, param: str) -> list[dict]:
    out: list[dict] = []
    call_names: dict[str, str] = {}
    reasoning: list[str] = []     # waiting for the next assistant message
    for i, item in enumerate(items):
        p = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise bad(p, "must be an input item object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            msg = _message(item, p)
            if msg["role"] == "assistant" and reasoning:
                msg["reasoning_content"] = "\n".join(reasoning)
                reasoning.clear()
            out.append(msg)
        elif kind == "function_call":
            call = _function_call(item, p)
            call_names[call["id"]] = call["function"]["name"]
            last = out[-1] if out else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": ""}
                if reasoning:
                    last["reasoning_content"] = "\n".join(reasoning)
                    reasoning.clear()
                out.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            out.append(_call_output(item, p, call_names))
        elif kind == "reasoning":
            text = _reasoning_text(item, p)
            if text:
                reasoning.append(text)
        elif kind == "item_reference":
            raise NotSupportedYet(f"{p}.type", "value 'item_reference'")
        elif isinstance(kind, str):
            raise NotSupportedYet(f"{p}.type", f"value {kind!r}")
        else:
            raise bad(p, "must have a 'type' or a 'role'")
    return out


def _string(item: dict, key: str, p: str, nonempty: bool = True) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (nonempty and not value):
        raise bad(f"{p}.{key}", "must be a non-empty string" if nonempty else "must be a string")
    return value


def _message(item: dict, p: str) -> dict:
    role = item.get("role")
    if role not in _ROLES:
        raise bad(f"{p}.role", f"must be one of {list(_ROLES)}, got {role!r}")
    return {"role": role, "content": _text(item.get("content"), role, f"{p}.content")}


def _text(content: Any, role: str, p: str) -> str:
    """A message's content as one string (parts joined with newlines)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(p, "must be a string or an array of content parts")
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS or (kind == "refusal" and role == "assistant"):
            key = "refusal" if kind == "refusal" else "text"
            texts.append(_string(part, key, f"{p}[{k}]", nonempty=False))
        elif kind in _UNSUPPORTED_PARTS:
            raise NotSupportedYet(f"{p}[{k}]", f"of type {kind!r}")
        else:
            raise bad(f"{p}[{k}]", f"must be a text part ({', '.join(_TEXT_PARTS)}), got type {kind!r}")
    return "\n".join(texts)


def _function_call(item: dict, p: str) -> dict:
    args = item.get("arguments", "")
    if not isinstance(args, str):
        raise bad(f"{p}.arguments", "must be a string holding the call's JSON arguments")
    return {"id": _string(item, "call_id", p), "type": "function",
            "function": {"name": _string(item, "name", p), "arguments": args}}


def _call_output(item: dict, p: str, call_names: dict[str, str]) -> dict:
    call_id = _string(item, "call_id", p)
    output = item.get("output")
    text = output if isinstance(output, str) else _text(output, "tool", f"{p}.output")
    msg = {"role": "tool", "tool_call_id": call_id, "content": text}
    if call_id in call_names:
        msg["name"] = call_names[call_id]
    return msg


def _reasoning_text(item: dict, p: str) -> str:
    content = item.get("content") or []
    if not isinstance(content, list):
        raise bad(f"{p}.content", "must be an array of reasoning_text parts")
    texts = []
    for k, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise bad(f"{p}.content[{k}]", "must be a reasoning_text part with a 'text'")
        texts.append(part["text"])
    return "\n".join(texts)
