"""Typing the text values of XML-style tool calls (qwen3_coder) with the offered tool's JSON schema.

`param_kind(tools, function, parameter)` reads the parameter's schema type and names one of
string | integer | number | boolean | object | array | null, or None when unknown (tool not offered,
parameter not in its schema, or a type we cannot single out, such as anyOf two types).
`convert(text, kind)` turns the text into a JSON value:
- "null" (any case) is null whatever the kind, as vLLM does;
- string: the text itself;
- integer: an integer literal -> int; number: an integer literal -> int, else a finite float
  (an integral float becomes an int, as vLLM does); boolean: true/false in any case;
  object/array: JSON (or a Python literal dict/list, as models sometimes write);
- unknown kind: a text that starts like a non-string JSON value and parses as one is that value;
- anything that does not convert stays the string (never an error, never a dropped value).
`certain_string(prefix, kind)` tells whether a value starting with `prefix` is a string whatever
follows (so it can be streamed before it ends). It must agree with `convert`.
"""

from __future__ import annotations

import ast
import math
import re

from tandem.parsers.json_stream import canonical, loads_finite

_INT = re.compile(r"[-+]?[0-9]+\Z")
_JSON_START = frozenset('{[-0123456789tfnTFN')
_ALIASES = (
    (("int", "uint", "long", "short", "unsigned"), "integer"),
    (("num", "float", "double", "decimal"), "number"),
    (("bool", "binary"), "boolean"),
    (("dict", "object"), "object"),
    (("list", "arr"), "array"),
    (("str", "text", "varchar", "char", "enum"), "string"),
    (("null",), "null"),
)


def _normalize(name: str) -> str | None:
    name = name.strip().lower()
    for prefixes, kind in _ALIASES:
        if name.startswith(prefixes):
            return kind
    return None


def _schema_kind(schema) -> str | None:
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return _normalize(t)
    if isinstance(t, list):
        kinds = {_normalize(x) for x in t if isinstance(x, str) and x != "null"}
        return kinds.pop() if len(kinds) == 1 else None
    if "enum" in schema and isinstance(schema["enum"], list):
        return "string" if all(isinstance(x, str) for x in schema["enum"]) else None
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            kinds = {_schema_kind(s) for s in schema[key]} - {"null"}
            return kinds.pop() if len(kinds) == 1 else None
    return None


def function_schema(tools: list[dict], function: str) -> dict | None:
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function", tool)
        if isinstance(fn, dict) and fn.get("name") == function:
            params = fn.get("parameters")
            return params if isinstance(params, dict) else {}
    return None


def param_kind(tools: list[dict], function: str, parameter: str) -> str | None:
    schema = function_schema(tools, function)
    props = schema.get("properties") if schema else None
    if not isinstance(props, dict) or parameter not in props:
        return None
    return _schema_kind(props[parameter])


def certain_string(prefix: str, kind: str | None) -> bool:
    """True when convert(prefix + anything, kind) is that text as a string."""
    if not prefix:
        return False
    if kind == "string":
        return not "null".startswith(prefix.lower())
    return kind is None and prefix[0] not in _JSON_START


def _json_safe(value) -> bool:
    try:
        canonical(value)
        loads_finite(canonical(value))
    except (TypeError, ValueError):
        return False
    return True


def convert(text: str, kind: str | None):
    if text.lower() == "null":
        return None
    s = text.strip()
    if kind == "string":
        return text
    if kind == "integer" and _INT.match(s):
        return int(s)
    if kind == "number":
        if _INT.match(s):
            return int(s)
        try:
            f = float(s)
        except ValueError:
            return text
        if not math.isfinite(f):
            return text
        return int(f) if f.is_integer() else f
    if kind == "boolean" and s.lower() in ("true", "false"):
        return s.lower() == "true"
    if kind in ("object", "array"):
        try:
            return loads_finite(s)
        except ValueError:
            pass
        try:
            value = ast.literal_eval(s)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return text
        return value if isinstance(value, (dict, list)) and _json_safe(value) else text
    if kind is None and text[:1] in _JSON_START:
        try:
            value = loads_finite(text)
        except ValueError:
            return text
        return text if isinstance(value, str) else value
    return text
