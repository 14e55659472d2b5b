"""Each GrammarSpec kind -> its xgrammar compile call, run wherever the compile runs (this process
or the compile process, tandem/grammar/compile_process.py).

A spec that does not compile, or that compiles to a grammar admitting no output at all (not even
the end: `root ::= root`, the regex `[^\\s\\S]`), is the caller's error: InvalidRequest naming
`structured_outputs` (the route renames it to the field used).
"""

from __future__ import annotations

import json

from tandem.errors import InvalidRequest
from tandem.grammar.schema_workarounds import json_safe_strings
from tandem.types import GrammarSpec

PARAM = "structured_outputs"


def choice_options(text: str) -> list[str]:
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"choice must be a JSON list of strings: {exc}", param=PARAM) from exc
    if not (isinstance(options, list) and options and all(isinstance(o, str) for o in options)):
        raise InvalidRequest("choice must be a non-empty list of strings", param=PARAM)
    return options


def compile_spec(compiler, spec: GrammarSpec):
    """`spec` compiled by `compiler` (an xgrammar GrammarCompiler) -> an xgrammar CompiledGrammar."""
    try:
        compiled = _compile(compiler, spec)
    except InvalidRequest:
        raise
    except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses with a message
        raise InvalidRequest(f"the {spec.kind} constraint does not compile: {exc}", param=PARAM) from exc
    if not _admits_anything(compiled):
        raise InvalidRequest(f"the {spec.kind} constraint admits no output, not even an empty one",
                             param=PARAM)
    return compiled


def _compile(compiler, spec: GrammarSpec):
    if spec.kind == "json_schema":
        schema = json_safe_strings(json.loads(spec.text))
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)
    if spec.kind == "json_object":   # OpenAI's JSON mode: an object, not any JSON value
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
    if spec.kind == "regex":
        return compiler.compile_regex(spec.text)
    if spec.kind == "choice":
        options = choice_options(spec.text)
        return compiler.compile_grammar("root ::= " + " | ".join(json.dumps(o, ensure_ascii=False)
                                                                for o in options))
    if spec.kind == "ebnf":
        return compiler.compile_grammar(spec.text)
    if spec.kind == "structural_tag":
        return compiler.compile_structural_tag(spec.text)
    raise InvalidRequest(f"unknown constraint kind {spec.kind!r}", param=PARAM)


def _admits_anything(compiled) -> bool:
    """Whether the first token may be anything at all (a stop token counts)."""
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    xgr.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)
    return bool(bitmask.any())
