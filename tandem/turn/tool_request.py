"""A request's `tools`, `tool_choice` and `parallel_tool_calls`, read and checked (400 naming the
parameter for anything malformed), shared by every API that offers tools.

- tools: OpenAI's `[{"type": "function", "function": {"name", "description"?, "parameters"?,
  "strict"?}}]`; `flat=True` also takes Workers AI's `[{"name", "description", "parameters"}]`
  (converted to OpenAI's shape, which chat templates read). Names are 1-64 of `[A-Za-z0-9_.-]`
  (every tool-call format can write them back) and unique; parameters, when given, are a JSON
  schema of an object.
- tool_choice: "auto" (the default with tools), "none" (the default without), "required", or
  `{"type": "function", "function": {"name": NAME}}` naming an offered tool.
- parallel_tool_calls: false allows at most one call per response.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tandem.turn.fields import Fields, bad

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class ToolRequest:
    tools: list[dict] | None = None   # OpenAI-shaped, for the chat template; None when none offered
    choice: str = "none"              # "auto" | "none" | "required" | "function" (named)
    function: str | None = None       # the name tool_choice forces (choice "function")
    parallel: bool = True             # parallel_tool_calls

    @property
    def parse_calls(self) -> bool:
        """Whether the output is parsed for calls: tools offered and tool_choice is not "none"."""
        return self.tools is not None and self.choice != "none"

    @property
    def forced(self) -> bool:
        """A call must come: tool_choice "required" or a named function."""
        return self.choice in ("required", "function")

    def callable_tools(self) -> list[dict]:
        """The tools a call may name: the named one, or every offered tool."""
        tools = self.tools or []
        if self.choice == "function":
            return [t for t in tools if t["function"]["name"] == self.function]
        return tools


def read_tools(f: Fields, flat: bool = False) -> ToolRequest:
    tools = _tools(f.raw("tools"), f.name("tools"), flat)
    choice, function = _choice(f.raw("tool_choice"), f.name("tool_choice"), tools)
    parallel = f.bool("parallel_tool_calls", True)
    return ToolRequest(tools, choice, function, parallel)


def _tools(raw: Any, param: str, flat: bool) -> list[dict] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise bad(param, "must be an array of tools")
    out, seen = [], set()
    for k, tool in enumerate(raw):
        p = f"{param}[{k}]"
        if flat and isinstance(tool, dict) and "function" not in tool and "name" in tool:
            tool = {"type": "function", "function": tool}   # Workers AI's flat tool
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise bad(p, "must be an object of type 'function'")
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"{p}.function", "must be an object with a non-empty 'name'")
        name = fn["name"]
        if not _NAME.fullmatch(name):
            raise bad(f"{p}.function.name", f"is {name!r}; names are 1 to 64 letters, digits, "
                      "'_', '.' or '-'")
        if name in seen:
            raise bad(f"{p}.function.name", f"repeats {name!r}; tool names must be unique")
        seen.add(name)
        params = fn.get("parameters")
        if params is not None:
            if not isinstance(params, dict):
                raise bad(f"{p}.function.parameters", "must be a JSON schema object")
            if params.get("type", "object") != "object":
                raise bad(f"{p}.function.parameters", "must be the JSON schema of an object "
                          f"(type 'object'), got type {params.get('type')!r}")
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise bad(f"{p}.function.description", "must be a string")
        out.append({**tool, "type": "function", "function": fn})
    return out or None


def _choice(raw: Any, param: str, tools: list[dict] | None) -> tuple[str, str | None]:
    if raw is None:
        return ("auto" if tools else "none"), None
    if isinstance(raw, str):
        if raw not in CHOICES:
            raise bad(param, f"must be one of {', '.join(CHOICES)} or a named function, got {raw!r}")
        if raw == "required" and not tools:
            raise bad(param, "is 'required' but no 'tools' are given")
        return raw, None
    fn = raw.get("function") if isinstance(raw, dict) and raw.get("type") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(param, 'must be "auto", "none", "required" or '
                  '{"type": "function", "function": {"name": ...}}')
    name = fn["name"]
    offered = [t["function"]["name"] for t in tools or []]
    if name not in offered:
        raise bad(param, f"names function {name!r}, which is not among the tools "
                  f"({', '.join(offered) or 'none given'})")
    return "function", name
