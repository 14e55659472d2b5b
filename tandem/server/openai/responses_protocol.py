"""A Responses API request body (`POST /v1/responses`) -> the chat turn it asks for.

Pure: reading a body needs only the served model's name; the route adds the conversation of
`previous_response_id` (responses_store.py) and runs the turn as a chat request (chat_turn.py).
Fields: `model`, `input` (responses_items.py), `instructions` (a system message first; not carried
over from a previous response, as OpenAI), function `tools` `{"type": "function", "name",
"description", "parameters", "strict"}`, `tool_choice` (auto, none, required, `{"type": "function",
"name"}`), `parallel_tool_calls`, `max_output_tokens`, `temperature`, `top_p`, `stream`, `store`
(default true), `previous_response_id`, `metadata`, `user`; vLLM's extras `top_k`, `seed`,
`cache_salt`, `priority`. Accepted and not acted on: `reasoning`, `include`, `truncation:
"disabled"`, `prompt_cache_key`, `safety_identifier`, `service_tier`, `max_tool_calls` (hosted
tools only). Refused (400, not supported): structured `text.format`, `background`, `conversation`,
`prompt`, `top_logprobs`, `truncation: "auto"`, hosted tools.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tandem.server.chat_turn import ChatTurn, ToolChoice, TurnParams
from tandem.server.errors import NotSupportedYet
from tandem.server.fields import Fields, bad
from tandem.server.openai.openai_protocol import check_model
from tandem.server.openai.responses_items import input_messages

PARAMS = TurnParams(messages="input", max_tokens="max_output_tokens", tools="tools")
_SEED_MIN, _SEED_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class ResponsesRequest:
    turn: ChatTurn                 # messages: instructions + this request's input (no history yet)
    new_messages: list[dict]       # this request's input items as chat messages
    instructions: str | None
    previous_response_id: str | None
    store: bool
    echo: dict                     # the Response fields that repeat the request

    def with_history(self, history: list[dict]) -> ChatTurn:
        """The turn with a previous response's conversation before this request's input."""
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        return replace(self.turn, messages=system + history + self.new_messages)


def parse_responses(body: dict, served_name: str) -> ResponsesRequest:
    f = Fields(body)
    model = check_model(f, served_name)
    _refuse_unsupported(f)
    instructions = f.str("instructions")
    new_messages = input_messages(f.raw("input"))
    raw_tools = f.raw("tools")
    tools = _tools(raw_tools)
    choice = _tool_choice(f.raw("tool_choice"), tools)
    turn = ChatTurn(
        model=model,
        messages=([{"role": "system", "content": instructions}] if instructions else []) + new_messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=f.bool("parallel_tool_calls", True),
        max_tokens=f.int("max_output_tokens", None, 1),
        temperature=f.float("temperature", None, 0.0, 2.0) if f.has("temperature") else None,
        top_p=f.float("top_p", None) if f.has("top_p") else None,
        top_k=_top_k(f),
        seed=f.int("seed", None, _SEED_MIN, _SEED_MAX),
        stream=f.bool("stream", False),
        cache_salt=f.str("cache_salt", nonempty=True),
        priority=f.int("priority", 0),
        params=PARAMS,
    )
    if turn.top_p is not None and not 0.0 < turn.top_p <= 1.0:
        raise bad("top_p", f"must be in (0, 1], got {turn.top_p}")
    metadata = f.raw("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("metadata", "must be an object of string keys and values")
    echo = {
        "instructions": instructions,
        "max_output_tokens": turn.max_tokens,
        "metadata": metadata or {},
        "parallel_tool_calls": turn.parallel_tool_calls,
        "previous_response_id": f.str("previous_response_id"),
        "reasoning": f.raw("reasoning") if isinstance(f.raw("reasoning"), dict) else None,
        "store": f.bool("store", True),
        "text": {"format": {"type": "text"}},
        "tool_choice": _echo_choice(choice),
        "tools": [_echo_tool(t) for t in raw_tools or []],
        "truncation": "disabled",
        "user": f.str("user"),
    }
    return ResponsesRequest(turn=turn, new_messages=new_messages, instructions=instructions,
                            previous_response_id=echo["previous_response_id"], store=echo["store"],
                            echo=echo)


def _top_k(f: Fields) -> int | None:
    k = f.int("top_k", None, -1)
    return None if k is None else (0 if k == -1 else k)   # vLLM spells "off" as -1


def _refuse_unsupported(f: Fields) -> None:
    text = f.obj("text")
    fmt = text.obj("format") if text is not None else None
    if fmt is not None and fmt.raw("type", "text") != "text":
        raise NotSupportedYet("text.format", f"of type {fmt.raw('type')!r}")
    if f.bool("background", False):
        raise NotSupportedYet("background")
    for key in ("conversation", "prompt"):
        if f.has(key):
            raise NotSupportedYet(key)
    if f.int("top_logprobs", 0, 0, 20):
        raise NotSupportedYet("top_logprobs")
    truncation = f.str("truncation", "disabled")
    if truncation != "disabled":
        raise NotSupportedYet("truncation", f"{truncation!r} (only 'disabled')")


def _tools(raw: Any) -> list[dict] | None:
    """Responses function tools -> chat tools."""
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
        if kind != "function":
            if isinstance(kind, str):
                raise NotSupportedYet(f"{p}.type", f"{kind!r} (function tools only)")
            raise bad(f"{p}.type", "must be 'function'")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"{p}.name", "must be a non-empty string")
        fn: dict = {"name": name}
        if tool.get("description") is not None:
            if not isinstance(tool["description"], str):
                raise bad(f"{p}.description", "must be a string")
            fn["description"] = tool["description"]
        if tool.get("parameters") is not None:
            if not isinstance(tool["parameters"], dict):
                raise bad(f"{p}.parameters", "must be a JSON schema object")
            fn["parameters"] = tool["parameters"]
        if tool.get("strict") is not None:
            if not isinstance(tool["strict"], bool):
                raise bad(f"{p}.strict", "must be a boolean")
            fn["strict"] = tool["strict"]
        out.append({"type": "function", "function": fn})
    names = [t["function"]["name"] for t in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise bad("tools", f"offers the function {dup!r} twice")
    return out or None


def _tool_choice(raw: Any, tools: list[dict] | None) -> ToolChoice:
    if raw is None:
        return ToolChoice("auto")
    if raw in ("auto", "none", "required"):
        choice = ToolChoice(raw)
    elif isinstance(raw, dict) and raw.get("type") == "function":
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise bad("tool_choice.name", "must name one of the tools")
        choice = ToolChoice("function", name)
    elif isinstance(raw, dict) and raw.get("type") == "allowed_tools":
        raise NotSupportedYet("tool_choice", "of type 'allowed_tools'")
    else:
        raise bad("tool_choice", "must be 'auto', 'none', 'required' or "
                  "{\"type\": \"function\", \"name\": ...}")
    if choice.mode in ("required", "function") and not tools:
        raise bad("tool_choice", f"is {raw!r}, which needs 'tools'")
    if choice.mode == "function" and choice.name not in {t["function"]["name"] for t in tools or []}:
        raise bad("tool_choice", f"names the function {choice.name!r}, which is not among the tools")
    return choice


def _echo_choice(choice: ToolChoice) -> Any:
    return {"type": "function", "name": choice.name} if choice.mode == "function" else choice.mode


def _echo_tool(tool: dict) -> dict:
    return {"type": "function", "name": tool["name"], "description": tool.get("description"),
            "parameters": tool.get("parameters"), "strict": tool.get("strict")}
