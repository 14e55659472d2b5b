"""Tool grammars in every parser's format: what the grammar lets a random-weight model write at
temperature 1 is what the parser reads back as calls of the offered tools, with arguments that
validate against their schemas; "auto" leaves text free but holds an opened call to the tools."""

from __future__ import annotations

import json

import pytest

from tandem.errors import InvalidRequest
from tandem.grammar.compiler import GrammarCompiler
from tandem.parsers import make_reasoning_parser, make_tool_parser
from tandem.turn.tool_grammar import arguments_schema, call_format, tool_call_grammar
from tandem.tokenization.tokenizer import Tokenizer
from tandem.types import EngineRequest, FinishReason, SamplingParams
from tandem_demo.schema_check import validate
from tests.conftest import IN_PROCESS_GRAMMARS

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 6},
    "days": {"type": "integer", "minimum": 1, "maximum": 9},
    "metric": {"type": "boolean"}},
    "required": ["city", "days"], "additionalProperties": False}
TIMER = {"type": "object", "properties": {"unit": {"enum": ["s", "min"]}}, "required": ["unit"],
         "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "set_timer", "parameters": TIMER}}]
SCHEMAS = {"get_weather": WEATHER, "set_timer": TIMER}

# (parser, chat template text that selects the format's variant)
FORMATS = [("hermes", None), ("llama3_json", None), ("mistral", None), ("mistral", "...[ARGS]..."),
           ("deepseek_v3", "```json"), ("deepseek_v3", "<｜tool▁sep｜>"), ("kimi_k2", None),
           ("qwen3_coder", None)]


@pytest.fixture(scope="module")
def tok(llama_dir):
    return Tokenizer.from_dir(llama_dir)


@pytest.fixture(scope="module")
def compiler(tok):
    return GrammarCompiler(tok.backend, tok.backend.get_vocab_size(), tok.eos_token_ids, IN_PROCESS_GRAMMARS)


def sample(engine, grammar, seeds, max_tokens=300, cut_ok=False, call_start="") -> list[str]:
    """Texts the random model writes under `grammar` at temperature 1, one per seed. A grammar
    that ends (a call, or one at most) makes every request stop before max_tokens; with parallel
    calls a random model may go on calling (`cut_ok`: such texts are returned without their
    last, cut call)."""
    for seed in seeds:
        engine.add_request(EngineRequest(f"r{seed}", [5, 6, 7], SamplingParams(
            max_tokens=max_tokens, temperature=1.0, seed=seed, grammar=grammar,
            skip_special_tokens=False)))
    texts = {f"r{s}": "" for s in seeds}
    reasons = {}
    while engine.has_work():
        for d in engine.step():
            texts[d.request_id] += d.new_text
            if d.finished:
                reasons[d.request_id] = d.finish_reason
    out = []
    for s in seeds:
        text, reason = texts[f"r{s}"], reasons[f"r{s}"]
        if reason is FinishReason.LENGTH and cut_ok:
            text = text[:text.rfind(call_start)]
        else:
            assert reason is FinishReason.STOP, (reason, text)
        out.append(text)
    return out


def assert_valid_calls(text: str, parser: str, names: set[str], most: int | None = None):
    out = make_tool_parser(parser).parse(text, TOOLS)
    assert out.tool_calls, text
    assert most is None or len(out.tool_calls) <= most, text
    for call in out.tool_calls:
        assert call.name in names, text
        args = json.loads(call.arguments)
        assert validate(args, SCHEMAS[call.name]) == [], (text, args)
    return out


@pytest.mark.parametrize("parser,template", FORMATS)
def test_required_and_named_calls_from_a_random_model_parse_and_validate(make_engine, llama_dir,
                                                                          parser, template):
    engine = make_engine(llama_dir, num_blocks=512)
    required = tool_call_grammar(parser, TOOLS, "required", None, True, chat_template=template)
    fmt = call_format(parser, template)
    for text in sample(engine, required, range(3), cut_ok=True, call_start=fmt.prefix):
        out = assert_valid_calls(text, parser, set(SCHEMAS))
        assert out.content is None, text     # nothing but calls
    one = tool_call_grammar(parser, TOOLS, "required", None, False, chat_template=template)
    for text in sample(engine, one, range(3, 5)):
        assert_valid_calls(text, parser, set(SCHEMAS), most=1)
    named = tool_call_grammar(parser, TOOLS, "function", "set_timer", True, chat_template=template)
    for text in sample(engine, named, range(5, 8)):
        assert_valid_calls(text, parser, {"set_timer"}, most=1)


def _accepts(compiler, tok, spec, text: str, complete: bool = False) -> bool:
    """Whether the grammar takes `text` (and, with `complete`, may end right after it)."""
    grammar = compiler.matcher(spec)
    ids = tok.encode(text, add_special_tokens=False) + ([tok.eos_token_ids[0]] if complete else [])
    return all(grammar.accept(t) for t in ids)


def test_auto_leaves_text_free_but_holds_an_opened_call_to_the_tools(compiler, tok):
    auto = tool_call_grammar("hermes", TOOLS, "auto", None, True)
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
    assert _accepts(compiler, tok, auto, "Any text at all, {even JSON}.")
    assert _accepts(compiler, tok, auto, "Let me check. " + good + "\nDone.")
    assert not _accepts(compiler, tok, auto, '<tool_call>\n{"name": "lookup_verse"')
    assert not _accepts(compiler, tok, auto, '<tool_call>\n{"name": "get_weather", "arguments": {"town"')
    assert not _accepts(compiler, tok, auto, '<tool_call>\n{"name": "set_timer", "arguments": {"unit": "h"')
    single = tool_call_grammar("hermes", TOOLS, "auto", None, False)
    assert _accepts(compiler, tok, single, good, complete=True)
    assert not _accepts(compiler, tok, single, good + "\n<tool_call>")


def test_a_reasoning_block_may_come_first_and_must_close_when_the_prompt_opened_it(compiler, tok):
    qwen3 = make_reasoning_parser("qwen3")
    call = '<tool_call>\n{"name": "set_timer", "arguments": {"unit": "s"}}\n</tool_call>'
    spec = tool_call_grammar("hermes", TOOLS, "required", None, True, reasoning=qwen3)
    assert _accepts(compiler, tok, spec, call, complete=True)
    assert _accepts(compiler, tok, spec, "<think>a timer, then</think>\n\n" + call, complete=True)
    inside = tool_call_grammar("hermes", TOOLS, "required", None, True, reasoning=qwen3,
                               starts_in_reasoning=True)
    assert _accepts(compiler, tok, inside, "thinking...</think>\n" + call, complete=True)
    assert _accepts(compiler, tok, inside, call)     # still thinking: any text goes
    assert not _accepts(compiler, tok, inside, call, complete=True)


def test_variants_follow_the_template_and_schemas_are_objects():
    assert call_format("mistral", "x[ARGS]y").infix == "[ARGS]"
    assert call_format("mistral", None).section == ("[TOOL_CALLS] [", "]")
    assert call_format("deepseek_v3", "<｜tool▁sep｜>{{name}}").infix == "<｜tool▁sep｜>"
    assert "```json" in call_format("deepseek_v3", "```json <｜tool▁sep｜>").infix
    assert arguments_schema({"function": {"name": "f"}}) == {"type": "object"}
    assert arguments_schema({"function": {"name": "f", "parameters": {"properties": {}}}}) == \
        {"type": "object", "properties": {}}


def test_without_a_tool_parser_calls_cannot_be_enforced():
    with pytest.raises(InvalidRequest) as info:
        tool_call_grammar(None, TOOLS, "required", None, True, "tools")
    assert info.value.param == "tools" and "--tool-call-parser" in info.value.message
    with pytest.raises(InvalidRequest) as info:
        tool_call_grammar("hermes", TOOLS, "function", "nope", True)
    assert info.value.param == "tool_choice"
