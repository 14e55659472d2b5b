"""Grammar compilation for a real (test) tokenizer, in the helper process: every kind compiles,
is cached, and a spec that does not compile, admits no output or is over a limit is a 400 naming
the parameter (and the limit)."""

from __future__ import annotations

import json

import pytest

from tandem.config import GrammarConfig
from tandem.errors import InvalidRequest
from tandem.grammar.compiler import GrammarCompiler
from tandem.tokenization.tokenizer import Tokenizer
from tandem.types import GrammarSpec


@pytest.fixture(scope="module")
def compiler(llama_dir):
    tok = Tokenizer.from_dir(llama_dir)
    return GrammarCompiler(tok.backend, tok.backend.get_vocab_size(), tok.eos_token_ids), tok


def _text_of(compiler_and_tok, spec, text):
    """Whether the grammar accepts `text` as a whole (token by token, as the engine feeds it)."""
    compiler, tok = compiler_and_tok
    grammar = compiler.matcher(spec)
    return all(grammar.accept(t) for t in tok.encode(text, add_special_tokens=False))


SCHEMA = json.dumps({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
                     "required": ["city", "n"], "additionalProperties": False})


@pytest.mark.parametrize("spec,good,bad", [
    (GrammarSpec("json_schema", SCHEMA), '{"city": "Paris", "n": 3}', '{"town": "Paris"}'),
    (GrammarSpec("json_object"), '{"a": [1, 2]}', "[1, 2]"),
    (GrammarSpec("regex", r"[a-c]+-\d"), "abca-7", "abd-7"),
    (GrammarSpec("choice", json.dumps(["yes", "no"])), "no", "maybe"),
    (GrammarSpec("ebnf", 'root ::= "x" ("y")*'), "xyyy", "yx"),
])
def test_each_kind_accepts_what_it_allows(compiler, spec, good, bad):
    assert _text_of(compiler, spec, good)
    assert not _text_of(compiler, spec, bad)


def test_compiled_grammars_are_cached_by_spec(compiler):
    comp, _ = compiler
    spec = GrammarSpec("regex", "[0-9]{3}")
    assert comp.compile(spec) is comp.compile(GrammarSpec("regex", "[0-9]{3}"))


@pytest.mark.parametrize("spec", [
    GrammarSpec("json_schema", "{not json"),
    GrammarSpec("json_schema", json.dumps({"type": "no-such-type"})),
    GrammarSpec("regex", "(unclosed"),
    GrammarSpec("ebnf", "root ::= missing_rule"),
    GrammarSpec("choice", "[]"),
    GrammarSpec("choice", json.dumps([1, 2])),
    GrammarSpec("ebnf", "root ::= root"),          # admits nothing, not even the end
    GrammarSpec("regex", r"[^\s\S]"),
])
def test_a_spec_that_does_not_compile_is_a_400(compiler, spec):
    with pytest.raises(InvalidRequest) as exc:
        compiler[0].compile(spec)
    assert exc.value.status == 400 and exc.value.param == "structured_outputs"


def test_resumed_tokens_rebuild_the_state_and_bad_ones_are_refused(compiler):
    comp, tok = compiler
    spec = GrammarSpec("regex", "ab+c")
    grammar = comp.matcher(spec, tok.encode("abb", add_special_tokens=False))
    assert all(grammar.accept(t) for t in tok.encode("bc", add_special_tokens=False))
    with pytest.raises(InvalidRequest, match="resumed output token"):
        comp.matcher(spec, tok.encode("ax", add_special_tokens=False))


def test_valid_prefix_cuts_a_draft_and_leaves_the_state(compiler):
    comp, tok = compiler
    grammar = comp.matcher(GrammarSpec("regex", "abc"))
    a, b, c, x = (tok.encode(ch, add_special_tokens=False)[0] for ch in "abcx")
    assert grammar.valid_prefix([a, b, x, c]) == 2
    assert grammar.valid_prefix([a, b, c]) == 3
    assert grammar.accept(a) and not grammar.accept(x)


@pytest.mark.parametrize("spec, limit", [
    (GrammarSpec("regex", "a" * 101), "--max-grammar-chars"),
    (GrammarSpec("choice", json.dumps([str(i) for i in range(6)])), "--max-grammar-choices"),
])
def test_a_spec_over_a_limit_is_refused_before_compiling(llama_dir, spec, limit):
    tok = Tokenizer.from_dir(llama_dir)
    comp = GrammarCompiler(tok.backend, tok.backend.get_vocab_size(), tok.eos_token_ids,
                           GrammarConfig(max_chars=100, max_choices=5))
    with pytest.raises(InvalidRequest, match=limit) as exc:
        comp.compile(spec)
    assert exc.value.param == "structured_outputs"
    assert comp.process is None   # nothing was compiled: no helper started


def test_a_failed_spec_is_refused_again_from_the_cache(compiler, monkeypatch):
    comp, _ = compiler
    spec = GrammarSpec("regex", "(also unclosed")
    with pytest.raises(InvalidRequest) as first:
        comp.compile(spec)
    first.value.param = "guided_regex"   # what a route does to the error it reports

    def no_compile(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(comp, "_compile", no_compile)
    with pytest.raises(InvalidRequest) as again:
        comp.compile(spec)
    assert again.value.message == first.value.message and again.value.param == "structured_outputs"
