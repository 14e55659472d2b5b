"""Length-bounded JSON-schema strings become patterns that xgrammar 0.2.8 compiles to valid JSON
(its own rule for them lets control characters through)."""

from __future__ import annotations

import json

import pytest

from tandem.config import GrammarConfig
from tandem.grammar.compiler import GrammarCompiler
from tandem.grammar.schema_workarounds import json_safe_strings
from tandem.tokenization.tokenizer import Tokenizer
from tandem.types import GrammarSpec


def test_bounded_strings_become_patterns_and_the_rest_is_untouched():
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 5},
        "b": {"type": "string", "minLength": 2},
        "c": {"type": "string", "maxLength": 5, "pattern": "^x+$"},
        "d": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 3}},
        "e": {"type": "integer", "maximum": 4}}}
    out = json_safe_strings(schema)
    assert out["properties"]["a"] == {"type": "string", "pattern": '^[^\\x00-\\x1f"\\\\]{0,5}$'}
    assert out["properties"]["b"] == {"type": "string", "pattern": '^[^\\x00-\\x1f"\\\\]{2,}$'}
    assert out["properties"]["c"] == schema["properties"]["c"]
    assert out["properties"]["d"]["items"]["pattern"] == '^[^\\x00-\\x1f"\\\\]{1,3}$'
    assert out["properties"]["e"] == schema["properties"]["e"]
    assert schema["properties"]["a"] == {"type": "string", "maxLength": 5}   # input unchanged
    assert json_safe_strings(True) is True


@pytest.mark.parametrize("text,ok", [('{"a": "xyz"}', True), ('{"a": "éàü"}', True), ('{"a": ""}', True),
                                     ('{"a": "wxyz"}', False), ('{"a": "x\x15"}', False)])
def test_the_pattern_keeps_the_bounds_and_refuses_control_characters(llama_dir, text, ok):
    tok = Tokenizer.from_dir(llama_dir)
    compiler = GrammarCompiler(tok.backend, tok.backend.get_vocab_size(), tok.eos_token_ids,
                               GrammarConfig(compile_timeout_s=None))   # in this process: no helper to start
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}, "required": ["a"]}
    grammar = compiler.matcher(GrammarSpec("json_schema", json.dumps(json_safe_strings(schema))))
    accepted = all(grammar.accept(t) for t in tok.encode(text, add_special_tokens=False))
    assert accepted is ok
