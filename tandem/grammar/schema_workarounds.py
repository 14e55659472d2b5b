"""JSON schemas rewritten around a bug of xgrammar 0.2.8, wherever tandem compiles a client's
schema: the compiler's json_schema kind, and the schemas the server embeds in tool-call
structural tags (tandem/turn/tool_grammar.py, structured_output.py).

A string with `minLength` / `maxLength` compiles to the characters `[^"\\\r\n]`: control characters
pass (a sampled model then writes JSON that does not parse) and escapes are refused. Such a string
(with no pattern, format, enum or const, which compile differently) becomes the pattern
`^[^\x00-\x1f"\\]{min,max}$` over plain characters: the same length bounds, and always valid JSON
(only quotes and backslashes, which the buggy rule refused too, cannot be written).
Everything else is returned as it came.
"""

from __future__ import annotations

from typing import Any

_OWN_RULES = ("pattern", "format", "enum", "const")


def json_safe_strings(schema: Any) -> Any:
    """`schema` with every length-bounded string turned into its pattern (a new object; the input
    is not changed)."""
    if isinstance(schema, list):
        return [json_safe_strings(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: json_safe_strings(v) for k, v in schema.items()}
    if out.get("type") == "string" and ("minLength" in out or "maxLength" in out) \
            and not any(k in out for k in _OWN_RULES):
        lo, hi = out.pop("minLength", 0), out.pop("maxLength", "")
        if isinstance(lo, int) and (hi == "" or isinstance(hi, int)):
            out["pattern"] = '^[^\\x00-\\x1f"\\\\]{%d,%s}$' % (lo, hi)
        else:   # not integers: leave it to the compiler to refuse
            out.update(minLength=lo, **({"maxLength": hi} if hi != "" else {}))
    return out
