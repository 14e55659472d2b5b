"""Which parsers read a turn's output (tandem/parsers), decided once per request by the route.

The tool-call format is the configured parser's (vLLM's `--tool-call-parser` names) or, when none
is configured, the one recognized in the model's chat template; the reasoning parser is only ever
configured. A turn that offers no tools is not parsed for calls (its text is all content).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from tandem.parsers import (IdFactory, OutputParser, OutputStream, detect_tool_parser,
                            make_reasoning_parser, make_tool_parser)
from tandem.types import ParserOptions


def special_token_texts(tokenizer: Any) -> frozenset[str]:
    """The texts of the tokenizer's special tokens (those skip_special_tokens drops)."""
    backend = getattr(tokenizer, "backend", None)   # test doubles have no tokenizers backend
    if backend is None:
        return frozenset()
    return frozenset(t.content for t in backend.get_added_tokens_decoder().values() if t.special)


def parser_options(configured: ParserOptions, tokenizer: Any) -> ParserOptions:
    """`configured` with the tool-call format filled from the chat template when it names none."""
    if configured.tool_call_parser is not None:
        return configured
    detected = detect_tool_parser(getattr(tokenizer, "chat_template", None))
    return ParserOptions(tool_call_parser=detected, reasoning_parser=configured.reasoning_parser)


@dataclass(frozen=True)
class TurnParsing:
    """The output parser of one turn and the tool-call format its grammar must produce."""

    parser: OutputParser | None     # None: the output is all content
    tool_format: str | None         # the tool-call parser's name (None: unknown format)
    keeps_special_tokens: bool      # decode with skip_special_tokens=False (markers are special)

    @classmethod
    def resolve(cls, options: ParserOptions, tools: list[dict] | None,
                specials: Collection[str] = ()) -> "TurnParsing":
        """Parsers by name; the tool parser only when `tools` are offered."""
        tool = make_tool_parser(options.tool_call_parser) \
            if tools and options.tool_call_parser else None
        reasoning = make_reasoning_parser(options.reasoning_parser) \
            if options.reasoning_parser else None
        if tool is None and reasoning is None:
            return cls(None, options.tool_call_parser, False)
        parser = OutputParser(reasoning, tool)
        return cls(parser, options.tool_call_parser, parser.keeps_special_tokens(specials))

    def stream(self, tools: list[dict] | None, new_id: IdFactory,
               prompt_text: str = "") -> OutputStream | None:
        """A per-request stream; `prompt_text` (the rendered prompt's tail) tells whether the
        template already opened a think block."""
        if self.parser is None:
            return None
        starts = None
        if self.parser.reasoning is not None and prompt_text:
            starts = self.parser.reasoning.prompt_starts_in_reasoning(prompt_text)
        return self.parser.stream(tools, new_id, starts)


class ParserChoice:
    """An app's parser options, with the format detected from the chat template and the
    tokenizer's special tokens read once, on first use (a worker loads its tokenizer in start())."""

    def __init__(self, configured: ParserOptions, tokenizer_of: Callable[[], Any]) -> None:
        self._configured = configured
        self._tokenizer_of = tokenizer_of
        self._resolved: tuple[ParserOptions, frozenset[str]] | None = None

    def for_tools(self, tools: list[dict] | None) -> TurnParsing:
        if self._resolved is None:
            tokenizer = self._tokenizer_of()
            self._resolved = (parser_options(self._configured, tokenizer), special_token_texts(tokenizer))
        options, specials = self._resolved
        return TurnParsing.resolve(options, tools, specials)
