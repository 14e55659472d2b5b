"""Structured-output fields of a request body -> the GrammarSpec the engine enforces.

Accepted (at most one of them per request; 400 naming the parameter otherwise):
- `response_format` (OpenAI): {"type": "text"} (no constraint), {"type": "json_object"},
  {"type": "json_schema", "json_schema": {"name", "schema", "strict"}} (`strict` false is
  enforced as well), and vLLM's {"type": "structural_tag", "format": {...}} or its older
  {"type": "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers": [...]}.
  `lenient_schema=True` (Workers AI) also takes `json_schema` as the schema itself.
- `structured_outputs` (vLLM): exactly one of `json` (a schema, object or JSON text), `regex`,
  `choice` (strings), `grammar` (xgrammar EBNF), `json_object` (true), `structural_tag`.
- vLLM's older `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`.
Only null leaves a field out: an empty choice list, regex or grammar is a 400 naming it (an empty
schema, {}, is a constraint: any JSON value). Here only shapes are checked; whether a schema, regex
or grammar compiles, within the limits of GrammarConfig, is decided by the worker's compiler, whose
400 names `structured_outputs` (the route renames it to the field used).
"""

from __future__ import annotations

import json
from typing import Any

from tandem.grammar.schema_workarounds import json_safe_strings
from tandem.turn.fields import Fields, bad
from tandem.types import GrammarSpec

_STRUCTURED_KEYS = {"json": "json_schema", "regex": "regex", "choice": "choice", "grammar": "ebnf",
                    "json_object": "json_object", "structural_tag": "structural_tag"}
_GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
           "guided_grammar": "grammar"}
# options of vLLM's structured_outputs that do not change what is valid output
_STRUCTURED_OPTIONS = ("disable_fallback", "disable_any_whitespace", "disable_additional_properties",
                       "whitespace_pattern", "backend")


def read_structured_output(f: Fields, lenient_schema: bool = False) -> tuple[GrammarSpec | None, str | None]:
    """(the constraint, the parameter it came from), or (None, None)."""
    found: list[tuple[GrammarSpec, str]] = []
    if f.has("response_format"):
        spec = _response_format(f.raw("response_format"), f.name("response_format"), lenient_schema)
        if spec is not None:
            found.append((spec, f.name("response_format")))
    if f.raw("structured_outputs") not in (None, {}):
        found.append((_structured_outputs(f.raw("structured_outputs"), f.name("structured_outputs")),
                      f.name("structured_outputs")))
    for field, key in _GUIDED.items():
        if f.raw(field) is not None:   # only null is absent: [] or "" is a constraint refused below
            found.append((_one(key, f.raw(field), f.name(field)), f.name(field)))
    if len(found) > 1:
        raise bad(found[1][1], f"cannot be combined with '{found[0][1]}': give one constraint")
    return found[0] if found else (None, None)


def _json_text(schema: Any, param: str) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise bad(param, f"is not valid JSON: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise bad(param, "must be a JSON schema (an object)")
    return json.dumps(json_safe_strings(schema), ensure_ascii=False)


def _response_format(raw: Any, param: str, lenient_schema: bool) -> GrammarSpec | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise bad(param, "must be an object with a 'type'")
    kind = raw["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec("json_object")
    if kind == "json_schema":
        js = raw.get("json_schema")
        if not isinstance(js, dict):
            raise bad(f"{param}.json_schema", "must be an object with 'name' and 'schema'")
        if "schema" in js or not lenient_schema:
            if js.get("name") is not None and not isinstance(js["name"], str):
                raise bad(f"{param}.json_schema.name", "must be a string")
            if js.get("strict") is not None and not isinstance(js["strict"], bool):
                raise bad(f"{param}.json_schema.strict", "must be a boolean")
            if js.get("schema") is None:
                raise bad(f"{param}.json_schema.schema", "is required")
            return GrammarSpec("json_schema", _json_text(js["schema"], f"{param}.json_schema.schema"))
        return GrammarSpec("json_schema", _json_text(js, f"{param}.json_schema"))
    if kind == "structural_tag":
        return GrammarSpec("structural_tag", _structural_tag(raw, param))
    raise bad(f"{param}.type", f"must be one of text, json_object, json_schema, structural_tag; "
              f"got {kind!r}")


def _structural_tag(raw: Any, param: str) -> str:
    """xgrammar's structural tag JSON: {"type": "structural_tag", "format": {...}}; vLLM's older
    form (structures + triggers) becomes a triggered-tags format."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise bad(param, f"is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise bad(param, "must be a structural tag object")
    if isinstance(raw.get("format"), dict):
        return json.dumps({"type": "structural_tag", "format": raw["format"]}, ensure_ascii=False)
    structures, triggers = raw.get("structures"), raw.get("triggers")
    if not (isinstance(structures, list) and structures and isinstance(triggers, list)
            and all(isinstance(t, str) for t in triggers)):
        raise bad(param, "must have a 'format', or 'structures' and 'triggers'")
    tags = []
    for k, s in enumerate(structures):
        if not (isinstance(s, dict) and isinstance(s.get("begin"), str)
                and isinstance(s.get("end"), str) and isinstance(s.get("schema"), (dict, bool))):
            raise bad(f"{param}.structures[{k}]", "must be an object with 'begin', 'schema', 'end'")
        tags.append({"type": "tag", "begin": s["begin"], "end": s["end"],
                     "content": {"type": "json_schema", "json_schema": s["schema"]}})
    fmt = {"type": "triggered_tags", "triggers": triggers, "tags": tags}
    return json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False)


def _structured_outputs(raw: Any, param: str) -> GrammarSpec:
    if not isinstance(raw, dict):
        raise bad(param, "must be an object")
    unknown = sorted(k for k in raw if k not in _STRUCTURED_KEYS and k not in _STRUCTURED_OPTIONS)
    if unknown:
        raise bad(param, f"has unknown keys {unknown}; one of {', '.join(_STRUCTURED_KEYS)} is expected")
    given = [k for k in _STRUCTURED_KEYS if raw.get(k) not in (None, False)]
    if len(given) != 1:
        raise bad(param, f"must set exactly one of {', '.join(_STRUCTURED_KEYS)}"
                  + (f"; got {given}" if given else ""))
    key = given[0]
    return _one(key, raw[key], f"{param}.{key}")


def _one(key: str, value: Any, param: str) -> GrammarSpec:
    if key == "json":
        return GrammarSpec("json_schema", _json_text(value, param))
    if key == "json_object":
        if value is not True:
            raise bad(param, "must be true")
        return GrammarSpec("json_object")
    if key == "choice":
        if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
            raise bad(param, "must be a non-empty array of strings")
        return GrammarSpec("choice", json.dumps(value, ensure_ascii=False))
    if key == "structural_tag":
        return GrammarSpec("structural_tag", _structural_tag(value, param))
    if not isinstance(value, str) or not value:
        raise bad(param, "must be a non-empty string")
    return GrammarSpec(_STRUCTURED_KEYS[key], value)
