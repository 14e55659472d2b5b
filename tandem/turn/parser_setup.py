"""Which output parsers a server runs (`--tool-call-parser`, `--reasoning-parser`), resolved once the
model's tokenizer is known.

- tool call parser: a name of tandem.parsers (vLLM's names), "auto" (the default: recognized from
  the chat template by `detect_tool_parser`, none when no known format shows) or "none".
- reasoning parser: a name, or None (the default: no reasoning split).
A worker and the gateway in front of it resolve the same settings from the same model directory, so
they agree; the gateway's routes are the ones that parse in a disaggregated cluster.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from tandem.parsers import (
    REASONING_PARSER_NAMES,
    TOOL_PARSER_NAMES,
    OutputParser,
    detect_tool_parser,
    make_reasoning_parser,
    make_tool_parser,
)
from tandem.types import ParserOptions

AUTO, NONE = "auto", "none"


def tool_parser_arg(text: str) -> str:
    """argparse type of --tool-call-parser."""
    if text in (AUTO, NONE) or text in TOOL_PARSER_NAMES:
        return text
    raise argparse.ArgumentTypeError(
        f"unknown tool call parser {text!r}; known: {AUTO} (from the chat template), {NONE}, "
        f"{', '.join(TOOL_PARSER_NAMES)}")


def reasoning_parser_arg(text: str) -> str | None:
    """argparse type of --reasoning-parser ("none" turns it off)."""
    if text == NONE:
        return None
    if text in REASONING_PARSER_NAMES:
        return text
    raise argparse.ArgumentTypeError(
        f"unknown reasoning parser {text!r}; known: {NONE}, {', '.join(REASONING_PARSER_NAMES)}")


def add_parser_flags(p: argparse.ArgumentParser) -> None:
    """--tool-call-parser, --reasoning-parser and their companions (tandem serve and gateway)."""
    p.add_argument("--tool-call-parser", type=tool_parser_arg, default=AUTO, metavar="NAME",
                   help=f"tool-call format of the model's output (vLLM's names: "
                        f"{', '.join(TOOL_PARSER_NAMES)}); {AUTO} (default): recognized from the chat "
                        f"template; {NONE}: calls stay text")
    p.add_argument("--reasoning-parser", type=reasoning_parser_arg, default=None, metavar="NAME",
                   help=f"split think blocks into reasoning_content ({', '.join(REASONING_PARSER_NAMES)}); "
                        "default: none")
    p.add_argument("--enable-auto-tool-choice", action="store_true",
                   help="accepted for vLLM compatibility: tool_choice auto is always on")
    p.add_argument("--no-auto-tool-grammar", dest="auto_tool_grammar", action="store_false",
                   help="tool_choice auto: do not constrain a call's name and arguments once the model "
                        "opens one (free text stays free either way)")
    p.add_argument("--no-tool-call-guard", dest="tool_call_guard", action="store_false",
                   help="let the output open a tool call where none may come (no tools in the request, "
                        "or tool_choice none); by default the format's call opening is masked there")


def parser_settings(args: argparse.Namespace) -> dict:
    """The ServerConfig / GatewayConfig fields of the flags above."""
    return {"tool_call_parser": args.tool_call_parser, "reasoning_parser": args.reasoning_parser,
            "constrain_auto_tool_calls": args.auto_tool_grammar, "tool_call_guard": args.tool_call_guard}


def parser_flag_args(tool_call_parser: str | None, reasoning_parser: str | None) -> tuple[str, ...]:
    """The `tandem serve` / `tandem gateway` arguments that pass these settings on (tandem up)."""
    out = ()
    if tool_call_parser is not None:
        out += (f"--tool-call-parser={tool_call_parser}",)
    if reasoning_parser is not None:
        out += (f"--reasoning-parser={reasoning_parser}",)
    return out


def _special_tokens(tokenizer: Any) -> frozenset[str]:
    backend = getattr(tokenizer, "backend", None)
    added = getattr(backend, "get_added_tokens_decoder", None)
    if added is None:   # test doubles
        return frozenset()
    return frozenset(t.content for t in added().values() if t.special)


@dataclass(frozen=True)
class ParserSetup:
    """The resolved parsers of one server, and what building tool grammars needs of the model."""

    tool_call_parser: str | None = None      # a name of TOOL_PARSER_NAMES, or None: no tool parsing
    reasoning_parser: str | None = None      # a name of REASONING_PARSER_NAMES, or None
    special_tokens: frozenset[str] = frozenset()   # the tokenizer's special tokens' texts
    chat_template: str | None = None         # picks among a format's variants (tool_grammar.py)
    # tool_choice "auto": constrain a call's body once the model opens one (tool_grammar.py)
    constrain_auto_tool_calls: bool = True
    # no tools or tool_choice "none": the call opening is kept out of the output (turn/tool_guard.py)
    tool_call_guard: bool = True

    @classmethod
    def resolve(cls, tool_call_parser: str, reasoning_parser: str | None, tokenizer: Any,
                constrain_auto_tool_calls: bool = True, tool_call_guard: bool = True) -> "ParserSetup":
        template = getattr(tokenizer, "chat_template", None)
        template = template if isinstance(template, str) else None
        tool = detect_tool_parser(template) if tool_call_parser == AUTO else tool_call_parser
        if tool == NONE:
            tool = None
        if tool is not None:
            make_tool_parser(tool)          # a bad name fails here, at start-up
        if reasoning_parser is not None:
            make_reasoning_parser(reasoning_parser)
        return cls(tool, reasoning_parser, _special_tokens(tokenizer), template,
                   constrain_auto_tool_calls, tool_call_guard)

    @property
    def options(self) -> ParserOptions:
        """The resolved names, as a request's RequestContext carries them."""
        return ParserOptions(self.tool_call_parser, self.reasoning_parser)

    def output_parser(self, with_tools: bool) -> OutputParser | None:
        """The parser of a chat response; the tool stage only when the request offers tools (and
        tool_choice is not "none"). None: the text is passed through as it is."""
        tool = make_tool_parser(self.tool_call_parser) if with_tools and self.tool_call_parser else None
        reasoning = make_reasoning_parser(self.reasoning_parser) if self.reasoning_parser else None
        if tool is None and reasoning is None:
            return None
        return OutputParser(reasoning, tool)
