"""Forced tool calls for a model whose call format tandem does not know (no tool-call parser), as
vLLM serves them: tool_choice "required" or a named function becomes a JSON grammar, and the JSON
is read back into tool calls (tandem/parsers/forced_json.py), streamed or not.

- "required": `[{"name": NAME, "parameters": ARGS}, ...]`, at least one item, each item one of the
  offered tools with its arguments' schema (vLLM's schema: an `anyOf` of `{name: enum [NAME],
  parameters: ARGS}`); at most one item with parallel_tool_calls false.
- a named function: the function's arguments object alone.
The tools' `$defs` are gathered at the list schema's root, where their `#/$defs/...` references
point (two tools defining one name differently: 400). With a reasoning parser, a free think block
may come first, as in the model-format grammars (tool_grammar.py).
"""

from __future__ import annotations

import json

from tandem.parsers import ReasoningParser, ToolParser
from tandem.parsers.forced_json import JSON_ARGUMENTS, JSON_LIST
from tandem.turn.fields import bad
from tandem.turn.tool_grammar import MAX_WHITESPACE, arguments_schema, think_block
from tandem.turn.tool_request import ToolRequest
from tandem.types import GrammarSpec

_DEFS_KEYS = ("$defs", "definitions")


def json_calls_parser(tools: ToolRequest) -> ToolParser:
    """The parser of the JSON a forcing `tools` request makes the model write."""
    assert tools.forced, "only a forced call is written as plain JSON"
    return JSON_ARGUMENTS if tools.choice == "function" else JSON_LIST


def json_calls_schema(tools: ToolRequest) -> dict:
    """The JSON schema of the whole output."""
    callable_tools = tools.callable_tools()
    if tools.choice == "function":
        return arguments_schema(callable_tools[0])
    defs: dict[str, dict] = {}
    items = []
    for tool in callable_tools:
        params = dict(arguments_schema(tool))
        for key in _DEFS_KEYS:
            for name, schema in (params.pop(key, None) or {}).items():
                if defs.setdefault(f"{key}/{name}", schema) != schema:
                    raise bad("tools", f"define {key[1:] if key[0] == '$' else key} {name!r} in "
                              "two different ways; forced calls need one definition per name")
        items.append({"type": "object", "properties": {
            "name": {"type": "string", "enum": [tool["function"]["name"]]}, "parameters": params},
            "required": ["name", "parameters"], "additionalProperties": False})
    schema: dict = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
    if not tools.parallel:
        schema["maxItems"] = 1
    for path, sub in defs.items():
        key, name = path.split("/", 1)
        schema.setdefault(key, {})[name] = sub
    return schema


def json_calls_grammar(tools: ToolRequest, reasoning: ReasoningParser | None = None,
                       starts_in_reasoning: bool = False) -> GrammarSpec:
    """The grammar of a forced call written as plain JSON (after a think block, with reasoning)."""
    body: dict = {"type": "json_schema", "json_schema": json_calls_schema(tools),
                  "max_whitespace_cnt": MAX_WHITESPACE}
    if reasoning is not None:
        body = {"type": "sequence", "elements": [think_block(reasoning, starts_in_reasoning), body]}
    return GrammarSpec("structural_tag", json.dumps({"type": "structural_tag", "format": body},
                                                    ensure_ascii=False))
