"""A Responses API request body (`POST /v1/responses`) -> the chat turn it asks for.

Pure: reading a body needs only the served model's name; the route adds the conversation of
`previous_response_id` (responses_store.py) and runs the turn as a chat request (chat_turn.py).
Fields: `model`, `input` (responses_items.py), `instructions` (a system message first; not carried
over from a previous response, as OpenAI), function `tools` `{"type": "function", "name",
"description", "parameters", "strict"}`, `tool_choice` (auto, none, required, `{"type": "function",
"name"}`; checked as the chat route checks them: tool_request.py), `parallel_tool_calls`,
`text.format` (text, json_object, json_schema {name, schema, strict}), `max_output_tokens`,
`temperature`, `top_p`, `stream`, `store` (default true), `previous_response_id`, `metadata`,
`user`; vLLM's extras `top_k`, `seed`, `cache_salt`, `priority`. Accepted and not acted on:
`reasoning`, `include`, `truncation: "disabled"`, `prompt_cache_key`, `safety_identifier`,
`service_tier`, `max_tool_calls` (hosted tools only). Refused (400, not supported): `background`,
`conversation`, `prompt`, `top_logprobs`, `truncation: "auto"`, hosted tools (`tools[i].type`
other than function: web_search, file_search, code_interpreter, computer_use, mcp...),
`allowed_tools`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tandem.api.chat_turn import ChatTurn, TurnParams
from tandem.api.openai.openai_protocol import check_model
from tandem.api.openai.responses_items import input_messages
from tandem.errors import InvalidRequest, NotSupportedYet
from tandem.turn.agent_hint import read_agent
from tandem.turn.fields import Fields, bad
from tandem.turn.structured_output import read_structured_output
from tandem.turn.tool_request import ToolRequest, read_tools
from tandem.types import GrammarSpec

PARAMS = TurnParams(messages="input", max_tokens="max_output_tokens", structured="text.format")
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
    tools = tool_request(raw_tools, f.raw("tool_choice"), f.bool("parallel_tool_calls", True))
    turn = ChatTurn(
        model=model,
        messages=([{"role": "system", "content": instructions}] if instructions else []) + new_messages,
        tools=tools,
        structured=structured_output(f),
        max_tokens=f.int("max_output_tokens", None, 1),
        temperature=f.float("temperature", None, 0.0, 2.0),
        top_p=f.float("top_p", None),
        top_k=_top_k(f),
        seed=f.int("seed", None, _SEED_MIN, _SEED_MAX),
        stream=f.bool("stream", False),
        cache_salt=f.str("cache_salt", nonempty=True),
        priority=f.int("priority", 0),
        expect_next_turn_s=read_agent(f),
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
        "parallel_tool_calls": tools.parallel,
        "previous_response_id": f.str("previous_response_id"),
        "reasoning": f.raw("reasoning") if isinstance(f.raw("reasoning"), dict) else None,
        "store": f.bool("store", True),
        "text": {"format": _text_format(f) or {"type": "text"}},
        "tool_choice": _echo_choice(tools),
        "tools": [_echo_tool(t) for t in raw_tools or []],
        "truncation": "disabled",
        "user": f.str("user"),
    }
    return ResponsesRequest(turn=turn, new_messages=new_messages, instructions=instructions,
                            previous_response_id=echo["previous_response_id"], store=echo["store"],
                            echo=echo)


def _text_format(f: Fields) -> Any:
    text = f.obj("text")
    return text.raw("format") if text is not None else None


def _top_k(f: Fields) -> int | None:
    k = f.int("top_k", None, -1)
    return None if k is None else (0 if k == -1 else k)   # vLLM spells "off" as -1


def _refuse_unsupported(f: Fields) -> None:
    if f.bool("background", False):
        raise NotSupportedYet("background")
    for key in ("conversation", "prompt"):
        if f.has(key):
            raise NotSupportedYet(key)
    if f.int("top_logprobs", 0, 0, 20):
        raise NotSupportedYet("top_logprobs")
    truncation = f.str("truncation", "disabled")
    if truncation != "disabled":
        raise NotSupportedYet("truncation", f"value {truncation!r} (only 'disabled')")


# Tools OpenAI runs on its side: a server of open models has no search index, sandbox or
# browser to run them with.
HOSTED_TOOLS = ("web_search", "web_search_preview", "web_search_preview_2025_03_11",
                "file_search", "code_interpreter", "computer_use", "computer_use_preview", "mcp",
                "image_generation", "local_shell", "shell", "apply_patch")


def _not_a_function_tool(param: str, kind: str) -> NotSupportedYet:
    """A 400 (code not_supported) naming `tools[i].type`, saying what to offer instead."""
    exc = NotSupportedYet(param)
    what = "a hosted tool, which tandem does not run" if kind in HOSTED_TOOLS else \
        "not a tool type tandem serves"
    exc.message = (f"'{param}' is {kind!r}: {what}. Only function tools are supported "
                   "({\"type\": \"function\", \"name\": ..., \"parameters\": {...}}): offer one "
                   "and run the tool in your own code")
    return exc


def _tools(raw: Any) -> list[dict] | None:
    """Responses function tools -> chat tools; any other type (hosted tools: web_search,
    file_search, code_interpreter, computer_use, mcp...) is a 400 naming `tools[i].type`."""
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
                raise _not_a_function_tool(f"{p}.type", kind)
            raise bad(f"{p}.type", "must be 'function'")
        fn = {"name": tool.get("name")}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def tool_request(raw_tools: Any, raw_choice: Any, parallel: bool) -> ToolRequest:
    """The tools (checked as the chat route checks them, errors naming Responses' fields) and
    tool_choice: "auto" (the default with tools), "none", "required", {"type": "function", "name"}."""
    chat_tools = _tools(raw_tools)
    if isinstance(raw_choice, dict) and raw_choice.get("type") == "allowed_tools":
        raise NotSupportedYet("tool_choice", "of type 'allowed_tools'")
    choice = raw_choice
    if isinstance(raw_choice, dict) and raw_choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": raw_choice.get("name")}}
    elif isinstance(raw_choice, dict):
        raise bad("tool_choice", "must be 'auto', 'none', 'required' or "
                  "{\"type\": \"function\", \"name\": ...}")
    try:
        return read_tools(Fields({"tools": chat_tools, "tool_choice": choice,
                                  "parallel_tool_calls": parallel}))
    except InvalidRequest as exc:   # tools[0].function.name -> tools[0].name
        if exc.param is not None and ".function" in exc.param:
            exc.param = exc.param.replace(".function", "")
            exc.message = exc.message.replace(".function", "")
        raise


def structured_output(f: Fields) -> GrammarSpec | None:
    """`text.format`: text (no constraint), json_object, or json_schema {name, schema, strict}
    (read as the chat route reads the same response_format)."""
    fmt = _text_format(f)
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise bad("text.format", "must be an object with a 'type'")
    if fmt["type"] == "json_schema":
        inner = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        fmt = {"type": "json_schema", "json_schema": inner}
    elif fmt["type"] not in ("text", "json_object"):
        raise NotSupportedYet("text.format", f"of type {fmt['type']!r}")
    try:
        spec, _ = read_structured_output(Fields({"response_format": fmt}))
    except InvalidRequest as exc:
        exc.param = "text.format"
        raise
    return spec


def _echo_choice(tools: ToolRequest) -> Any:
    return {"type": "function", "name": tools.function} if tools.choice == "function" else tools.choice


def _echo_tool(tool: dict) -> dict:
    return {"type": "function", "name": tool["name"], "description": tool.get("description"),
            "parameters": tool.get("parameters"), "strict": tool.get("strict")}
