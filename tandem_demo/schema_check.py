"""A small JSON-schema validator for the subset the demo tools use, and a tool-call parser.

Supported keywords: type (object, string, integer, number, boolean, array), properties, required,
additionalProperties (false or absent), enum, pattern, minimum, maximum, items.
Unknown properties are rejected (a tool call must not invent arguments).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_TYPES = {
    "string": lambda v: isinstance(v, str),
    # bool is a subclass of int in Python; JSON keeps them apart
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def validate(value, schema: dict, where: str = "$") -> list[str]:
    """Every violation of `schema` by `value`, as human-readable strings (empty when valid)."""
    errors: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        if kind not in _TYPES:
            return [f"{where}: unsupported schema type {kind!r}"]
        if not _TYPES[kind](value):
            return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value} > maximum {schema['maximum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: missing required property {key!r}")
        for key, item in value.items():
            if key in props:
                errors.extend(validate(item, props[key], f"{where}.{key}"))
            elif schema.get("additionalProperties", False) is False:
                errors.append(f"{where}: unexpected property {key!r}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors.extend(validate(item, schema["items"], f"{where}[{i}]"))
    return errors


@dataclass(frozen=True)
class ToolCallCheck:
    ok: bool            # well-formed, names an offered tool, arguments validate
    name: str | None
    arguments: dict | None
    reason: str         # "" when ok


_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> list[str]:
    """The raw bodies of every <tool_call>...</tool_call> block, in order."""
    return [m.group(1) for m in _CALL_RE.finditer(text)]


def check_tool_call(body: str, schemas: dict[str, dict]) -> ToolCallCheck:
    """Whether one tool-call body is JSON {"name", "arguments"} naming a tool in `schemas`
    with arguments that validate against that tool's parameters schema."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCallCheck(False, None, None, f"invalid JSON: {e}")
    if not isinstance(obj, dict) or set(obj) != {"name", "arguments"}:
        return ToolCallCheck(False, None, None, "expected an object with keys name and arguments")
    name, args = obj["name"], obj["arguments"]
    if name not in schemas:
        return ToolCallCheck(False, str(name), None, f"unknown tool {name!r}")
    errors = validate(args, schemas[name])
    if errors:
        return ToolCallCheck(False, name, args if isinstance(args, dict) else None, "; ".join(errors))
    return ToolCallCheck(True, name, args, "")


def check_tool_call_turn(text: str, schemas: dict[str, dict]) -> list[ToolCallCheck]:
    """Checks for every call in an assistant turn; a turn with no call yields one failed check."""
    bodies = parse_tool_calls(text)
    if not bodies:
        return [ToolCallCheck(False, None, None, "no <tool_call> block")]
    return [check_tool_call(b, schemas) for b in bodies]
