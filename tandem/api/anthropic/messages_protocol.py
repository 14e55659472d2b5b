"""An Anthropic Messages request body (`POST /v1/messages`) -> the chat turn it asks for.

Pure (the body and the served model's name). Fields: `model`, `max_tokens` (required),
`system` (a string or text blocks), `messages` (`role` user or assistant; content a string or
blocks: `text`, `tool_use` {id, name, input}, `tool_result` {tool_use_id, content, is_error},
`thinking` (an assistant's reasoning, as chat templates read it); images and documents refused),
`tools` ({name, description, input_schema}; Anthropic's server and client tools with a `type`
refused), `tool_choice` ({type: auto|any|tool|none, name, disable_parallel_tool_use}),
`output_config.format` (a JSON schema the text must match), `stop_sequences`, `stream`, and the
sampling fields older clients send, `temperature` (0 to 1), `top_p`, `top_k`. Accepted and not
acted on: `metadata`, `thinking`, `service_tier`, `output_config.effort`, `cache_control` (tandem
caches every prefix), a tool's `strict` (tool calls are held to their schemas anyway).

In chat messages: a user message's `tool_result` blocks become `role: tool` messages (in order,
before the text that follows them), an assistant's `tool_use` blocks its `tool_calls`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tandem.api.chat_turn import ChatTurn, TurnParams
from tandem.api.openai.openai_protocol import check_model
from tandem.errors import InvalidRequest, NotSupportedYet
from tandem.turn.agent_hint import read_agent
from tandem.turn.fields import Fields, bad
from tandem.turn.structured_output import read_structured_output
from tandem.turn.tool_request import ToolRequest, read_tools
from tandem.types import GrammarSpec

PARAMS = TurnParams(messages="messages", max_tokens="max_tokens", structured="output_config.format")
_UNSUPPORTED_BLOCKS = ("image", "document", "search_result", "server_tool_use",
                       "web_search_tool_result", "container_upload")


@dataclass(frozen=True)
class MessagesRequest:
    turn: ChatTurn
    stop_sequences: tuple[str, ...]


def parse_messages(body: dict, served_name: str, count_only: bool = False) -> MessagesRequest:
    """`count_only` (the count_tokens route): max_tokens and sampling fields are not needed."""
    f = Fields(body)
    model = check_model(f, served_name)
    for key in ("container", "mcp_servers"):
        if f.has(key):
            raise NotSupportedYet(key)
    max_tokens = f.int("max_tokens", None, 1)
    if max_tokens is None and not count_only:
        raise bad("max_tokens", "is required")
    system = _system(f.raw("system"))
    messages = system + _messages(f.raw("messages"))
    tools = tool_request(f.raw("tools"), f.raw("tool_choice"))
    stops = f.str_or_list("stop_sequences")
    top_k = f.int("top_k", None, 0)
    turn = ChatTurn(
        model=model, messages=messages, tools=tools, structured=_output_format(f), max_tokens=max_tokens,
        temperature=f.float("temperature", None, 0.0, 1.0),
        top_p=f.float("top_p", None, 0.0, 1.0),
        top_k=top_k,
        stop=stops,
        stream=f.bool("stream", False),
        expect_next_turn_s=read_agent(f),
        params=PARAMS)
    if turn.top_p is not None and turn.top_p == 0.0:
        raise bad("top_p", "must be greater than 0")
    return MessagesRequest(turn=turn, stop_sequences=stops)


def _output_format(f: Fields) -> GrammarSpec | None:
    """`output_config.format` {"type": "json_schema", "schema"} (structured outputs), read as the
    chat route reads the same response_format; `output_config.effort` is not acted on."""
    config = f.obj("output_config")
    fmt = config.raw("format") if config is not None else None
    if fmt is None:
        return None
    if not (isinstance(fmt, dict) and fmt.get("type") == "json_schema"
            and isinstance(fmt.get("schema"), dict)):
        raise bad("output_config.format", 'must be {"type": "json_schema", "schema": {...}}')
    response_format = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
    try:
        return read_structured_output(Fields({"response_format": response_format}))[0]
    except InvalidRequest as exc:
        exc.param = "output_config.format"
        raise


def _system(raw: Any) -> list[dict]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"role": "system", "content": raw}] if raw else []
    if not isinstance(raw, list):
        raise bad("system", "must be a string or an array of text blocks")
    texts = [_text_block(b, f"system[{k}]") for k, b in enumerate(raw)]
    return [{"role": "system", "content": "\n".join(texts)}] if texts else []


def _text_block(block: Any, p: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise bad(p, "must be a text block {\"type\": \"text\", \"text\": ...}")
    if not isinstance(block.get("text"), str):
        raise bad(f"{p}.text", "must be a string")
    return block["text"]


def _blocks(content: Any, p: str) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad(p, "must be a string or an array of content blocks")
    for k, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise bad(f"{p}[{k}]", "must be a content block with a 'type'")
    return content


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise bad("messages", "must be a non-empty array of messages")
    out: list[dict] = []
    names: dict[str, str] = {}    # tool_use id -> tool name, for the tool messages answering it
    for i, msg in enumerate(raw):
        p = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise bad(p, "must be an object with 'role' and 'content'")
        role = msg.get("role")
        if role not in ("user", "assistant"):
            raise bad(f"{p}.role", f"must be 'user' or 'assistant', got {role!r}")
        blocks = _blocks(msg.get("content"), f"{p}.content")
        if role == "assistant":
            out.append(_assistant(blocks, f"{p}.content", names))
        else:
            out += _user(blocks, f"{p}.content", names)
    return out


def _assistant(blocks: list[dict], p: str, names: dict[str, str]) -> dict:
    texts, reasoning, calls = [], [], []
    for k, block in enumerate(blocks):
        kind, q = block["type"], f"{p}[{k}]"
        if kind == "text":
            texts.append(_text_block(block, q))
        elif kind == "thinking":
            if not isinstance(block.get("thinking"), str):
                raise bad(f"{q}.thinking", "must be a string")
            reasoning.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue   # opaque to anyone but its maker
        elif kind == "tool_use":
            call_id, name = _nonempty(block, "id", q), _nonempty(block, "name", q)
            args = block.get("input", {})
            if not isinstance(args, dict):
                raise bad(f"{q}.input", "must be an object")
            names[call_id] = name
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
        else:
            _refuse_block(kind, q)
    msg: dict = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        msg["reasoning_content"] = "\n".join(reasoning)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user(blocks: list[dict], p: str, names: dict[str, str]) -> list[dict]:
    out: list[dict] = []
    texts: list[str] = []
    for k, block in enumerate(blocks):
        kind, q = block["type"], f"{p}[{k}]"
        if kind == "text":
            texts.append(_text_block(block, q))
        elif kind == "tool_result":
            if texts:
                out.append({"role": "user", "content": "\n".join(texts)})
                texts = []
            out.append(_tool_result(block, q, names))
        else:
            _refuse_block(kind, q)
    if texts or not out:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _tool_result(block: dict, q: str, names: dict[str, str]) -> dict:
    call_id = _nonempty(block, "tool_use_id", q)
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                _refuse_block(kind, f"{q}.content[{k}]")
            parts.append(_text_block(part, f"{q}.content[{k}]"))
        text = "\n".join(parts)
    else:
        raise bad(f"{q}.content", "must be a string or an array of text blocks")
    if block.get("is_error") is True:
        text = f"Error: {text}"
    msg = {"role": "tool", "tool_call_id": call_id, "content": text}
    if call_id in names:
        msg["name"] = names[call_id]
    return msg


def _refuse_block(kind: Any, q: str) -> None:
    if kind in _UNSUPPORTED_BLOCKS:
        raise NotSupportedYet(q, f"of type {kind!r}")
    raise bad(f"{q}.type", f"{kind!r} is not a content block type this message can hold")


def _nonempty(block: dict, key: str, q: str) -> str:
    value = block.get(key)
    if not isinstance(value, str) or not value:
        raise bad(f"{q}.{key}", "must be a non-empty string")
    return value


def _tools(raw: Any) -> list[dict] | None:
    """Anthropic tools -> chat tools (their names and schemas checked by read_tools)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise bad("tools", "must be an array of tools")
    out = []
    for k, tool in enumerate(raw):
        p = f"tools[{k}]"
        if not isinstance(tool, dict):
            raise bad(p, "must be a tool object")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise NotSupportedYet(f"{p}.type", f"value {kind!r} (client tools with an input_schema only)")
        if not isinstance(tool.get("input_schema"), dict):
            raise bad(f"{p}.input_schema", "must be a JSON schema object")
        fn = {"name": tool.get("name"), "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def tool_request(raw_tools: Any, raw_choice: Any) -> ToolRequest:
    """tools and tool_choice ({type: auto|any|tool|none, name, disable_parallel_tool_use})."""
    tools = _tools(raw_tools)
    choice: Any = None
    parallel = True
    if raw_choice is not None:
        if not isinstance(raw_choice, dict):
            raise bad("tool_choice", 'must be an object {"type": "auto" | "any" | "tool" | "none"}')
        parallel = not Fields(raw_choice, "tool_choice.").bool("disable_parallel_tool_use", False)
        kind = raw_choice.get("type")
        if kind not in ("auto", "any", "tool", "none"):
            raise bad("tool_choice.type", f"must be 'auto', 'any', 'tool' or 'none', got {kind!r}")
        if kind in ("any", "tool") and not tools:
            raise bad("tool_choice", f"of type {kind!r} needs 'tools'")
        choice = {"auto": "auto", "none": "none", "any": "required"}.get(kind) or \
            {"type": "function", "function": {"name": raw_choice.get("name")}}
    try:
        return read_tools(Fields({"tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel}))
    except InvalidRequest as exc:   # name Anthropic's fields: tools[0].name, tool_choice.name
        param = (exc.param or "").replace(".function.parameters", ".input_schema") \
            .replace(".function", "")
        if param == "tool_choice" and isinstance(choice, dict):
            param = "tool_choice.name"
        exc.message = exc.message.replace(f"'{exc.param}'", f"'{param}'")
        exc.param = param or None
        raise
