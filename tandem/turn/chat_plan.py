"""What a chat request's tools and structured-output fields make of its generation: the grammar the
engine enforces, how the output is parsed, and whether special tokens stay in the text.

- Output parsing (ChatOutputSpec): the server's reasoning parser, and its tool-call parser when the
  request offers tools and tool_choice is not "none". None when neither runs (text passes through).
- Grammar, one per request: `response_format` / `structured_outputs` when given (then tool_choice
  may not force a call: 400); else, with tools and a tool-call parser, the tool grammar
  (tool_grammar.py): forced calls for "required" or a named function, and for "auto" (unless the
  server turned it off, or the format's calls open like plain JSON: llama3_json) free text whose
  calls are held to the offered tools once opened.
- Where no call may come (no tools, or tool_choice "none") and the server has a tool-call parser:
  the guard (tool_guard.py), free text without the format's call opening, unless the server turned
  it off. A structured output replaces it: the client's grammar decides the text (a JSON answer
  leaves no place for a call's markup outside its strings).
- Forcing a call without a tool-call parser (a format tandem does not know): the call is written
  as plain JSON and parsed back (json_tools.py), as vLLM does.
- Decoding keeps special tokens when the parsers' markers are special in this tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.parsers import OutputParser, make_reasoning_parser
from tandem.turn.chat_output import ChatOutputSpec
from tandem.turn.fields import bad
from tandem.turn.json_tools import json_calls_grammar, json_calls_parser
from tandem.turn.parser_setup import ParserSetup
from tandem.turn.tool_grammar import constrains_auto, tool_call_grammar
from tandem.turn.tool_guard import call_openings, no_calls_grammar
from tandem.turn.tool_request import ToolRequest
from tandem.types import GrammarSpec, ParserOptions


@dataclass(frozen=True)
class ChatPlan:
    output: ChatOutputSpec | None = None
    grammar: GrammarSpec | None = None
    grammar_param: str | None = None     # the request field the grammar came from (for its errors)
    keep_special_tokens: bool = False

    @property
    def parser_options(self) -> ParserOptions:
        """The parsers that run, by name (carried in the request's RequestContext)."""
        if self.output is None:
            return ParserOptions()
        p = self.output.parser
        return ParserOptions(p.tool.name if p.tool else None, p.reasoning.name if p.reasoning else None)


def plan_chat(setup: ParserSetup, tools: ToolRequest, structured: GrammarSpec | None,
              structured_param: str | None, prompt_tail: str) -> ChatPlan:
    """`prompt_tail`: the end of the rendered prompt (special tokens as text), which tells whether
    the template opened a think block."""
    if tools.forced and structured is not None:
        raise bad(structured_param or "response_format",
                  "cannot be combined with a tool_choice that forces a call")
    if tools.forced and setup.tool_call_parser is None:
        return _plan_json_calls(setup, tools, prompt_tail)
    parser = setup.output_parser(tools.parse_calls)
    grammar, param = structured, structured_param
    if grammar is None and not tools.parse_calls and setup.tool_call_parser and setup.tool_call_guard:
        grammar = no_calls_grammar(call_openings(setup.tool_call_parser, setup.chat_template))
    if parser is None:
        return ChatPlan(None, grammar, param)
    starts = parser.reasoning.prompt_starts_in_reasoning(prompt_tail) if parser.reasoning else None
    auto = setup.constrain_auto_tool_calls and constrains_auto(setup.tool_call_parser, setup.chat_template)
    if parser.tool is not None and structured is None and (tools.forced or auto):
        grammar = tool_call_grammar(parser.tool.name, tools.tools or [], tools.choice, tools.function,
                                    tools.parallel, "tools", chat_template=setup.chat_template,
                                    reasoning=parser.reasoning, starts_in_reasoning=bool(starts))
        param = "tools"
    output = ChatOutputSpec(parser, tools.tools if parser.tool else None, starts, tools.parallel)
    return ChatPlan(output, grammar, param, parser.keeps_special_tokens(setup.special_tokens))


def _plan_json_calls(setup: ParserSetup, tools: ToolRequest, prompt_tail: str) -> ChatPlan:
    """A forced call on a server without a tool-call parser: plain JSON (json_tools.py)."""
    reasoning = make_reasoning_parser(setup.reasoning_parser) if setup.reasoning_parser else None
    parser = OutputParser(reasoning, json_calls_parser(tools))
    starts = reasoning.prompt_starts_in_reasoning(prompt_tail) if reasoning else None
    grammar = json_calls_grammar(tools, reasoning, bool(starts))
    output = ChatOutputSpec(parser, tools.callable_tools(), starts, tools.parallel)
    return ChatPlan(output, grammar, "tools", parser.keeps_special_tokens(setup.special_tokens))
