"""The tool-call parsers by vLLM's names (`--tool-call-parser NAME`), and recognizing a model's
format from the text of its chat template."""

from __future__ import annotations

from tandem.errors import InvalidRequest
from tandem.parsers.deepseek_v3 import DEEPSEEK_V3
from tandem.parsers.hermes import HERMES
from tandem.parsers.kimi_k2 import KIMI_K2
from tandem.parsers.llama3_json import LLAMA3_JSON
from tandem.parsers.mistral import MISTRAL
from tandem.parsers.qwen3_coder import QWEN3_CODER
from tandem.parsers.tool_stream import ToolParser

_TOOL_PARSERS: tuple[ToolParser, ...] = (HERMES, LLAMA3_JSON, MISTRAL, DEEPSEEK_V3, KIMI_K2, QWEN3_CODER)
TOOL_PARSER_NAMES: tuple[str, ...] = tuple(p.name for p in _TOOL_PARSERS)


class UnknownParser(InvalidRequest, ValueError):
    """A parser name that is not one of ours (400 through the API, a ValueError for the CLI)."""


def make_tool_parser(name: str) -> ToolParser:
    for parser in _TOOL_PARSERS:
        if parser.name == name:
            return parser
    raise UnknownParser(f"unknown tool call parser {name!r}; known parsers: {', '.join(TOOL_PARSER_NAMES)}",
                        param="tool_call_parser")


# (name, every one of these substrings is in the template); the first rule that matches wins, so
# the more specific formats come first (qwen3_coder templates also hold "<tool_call>").
_TEMPLATE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kimi_k2", ("<|tool_calls_section_begin|>",)),
    ("deepseek_v3", ("<｜tool▁calls▁begin｜>",)),
    ("deepseek_v3", ("<｜tool▁call▁begin｜>",)),
    ("mistral", ("[TOOL_CALLS]",)),
    ("qwen3_coder", ("<function=", "<parameter=")),
    ("hermes", ("<tool_call>",)),
    ("llama3_json", ("<|python_tag|>",)),
    ("llama3_json", ("<|start_header_id|>", '"parameters"')),
)


def detect_tool_parser(chat_template: str | None) -> str | None:
    """The tool-call parser name for a chat template's text, or None when no known format shows."""
    if not chat_template:
        return None
    for name, needles in _TEMPLATE_RULES:
        if all(n in chat_template for n in needles):
            return name
    return None
