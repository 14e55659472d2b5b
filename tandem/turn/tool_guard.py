"""The tool-call guard: where no call may come (no `tools` in the request, or tool_choice "none"),
the text that opens a call in the model's format is kept out of the output, so a model cannot
answer an ordinary question with a call naming tools nobody offered (vLLM and Dynamo mask the
opening for "none" the same way).

The guard is a grammar, one of the kinds the engine already enforces per row: xgrammar's free
text with excluded strings (`any_text` with `excludes`), which forbids each opening as a string,
not the tokens spelling it: `<tool_call>` is refused whether the model writes it as one added
token or as `<`, `tool`, `_call`, `>`, while `<` and `tool` alone stay free. Stop tokens stay
allowed everywhere. Its mask costs about what an "auto" tool grammar's free text costs (xgrammar
precomputes the token sets of each state: ~5 us per row for a 151k vocabulary, measured).

The openings are the parser's call markers and, when it is markup, the format's trigger (deepseek
and kimi open a section before the first call). llama3_json is guarded at `<|python_tag|>` only:
its other opening is a bare `{"name"` at the start, which an ordinary JSON answer may write too.
"""

from __future__ import annotations

import json

from tandem.parsers import make_tool_parser
from tandem.turn.tool_grammar import call_format
from tandem.types import GrammarSpec


def call_openings(tool_format: str, chat_template: str | None = None) -> tuple[str, ...]:
    """The texts that open tool calls in the format of the parser `tool_format` (its variant read
    off `chat_template`), in a fixed order."""
    fmt = call_format(tool_format, chat_template)
    openings = make_tool_parser(tool_format).start_markers
    if fmt.trigger_is_markup:
        openings += (fmt.trigger,)
    return tuple(dict.fromkeys(openings))


def no_calls_grammar(openings: tuple[str, ...]) -> GrammarSpec:
    """Any text (and a stop token) in which none of `openings` appears."""
    assert openings, "a guard needs at least one opening to exclude"
    return GrammarSpec("structural_tag", json.dumps(
        {"type": "structural_tag", "format": {"type": "any_text", "excludes": list(openings)}},
        ensure_ascii=False), trusted=True)
