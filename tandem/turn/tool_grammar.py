"""Tool calls enforced by grammar: an xgrammar structural tag in the model's own call format.

For each tool-call format of tandem.parsers, `CallFormat` says how one call is written (the text
before its arguments, the arguments' encoding, the text after), what separates calls, what wraps
them (a section), and the text that opens calls (the trigger). From it:
- tool_choice "required": one or more calls of the offered tools and nothing else (one with
  parallel_tool_calls false); a named function: exactly one call of it.
- tool_choice "auto": free text until the model writes the trigger; from there the calls are held
  to the offered tools' names and argument schemas (xgrammar's triggered tags), then free text again.
  Only where the trigger is markup (`constrains_auto`): llama3_json's calls open like any JSON answer.
Every call's arguments are the tool's JSON schema (an object, `{"type": "object"}` when the tool has
no parameters). With a reasoning parser, a think block may come first (it must when the prompt
already opened it) and is free.

The formats are written exactly as the parsers read them (tests/turn/test_tool_grammar.py parses
what the grammar lets a random model write), including their variants chosen by the chat template:
mistral's JSON list or `NAME[ARGS]{...}` (v11 and later), deepseek_v3's fenced or V3.1 calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tandem.grammar.schema_workarounds import json_safe_strings
from tandem.parsers import ReasoningParser
from tandem.parsers.schema_values import param_kind
from tandem.turn.fields import bad
from tandem.types import GrammarSpec

# consecutive whitespace inside arguments (`{"a": 1}` needs 1); bounded so a sampled model cannot pad forever
MAX_WHITESPACE = 2


@dataclass(frozen=True)
class CallFormat:
    trigger: str                          # opens the calls in free text (tool_choice auto)
    prefix: str                           # before a call's name
    infix: str                            # between the name and the arguments
    suffix: str                           # after the arguments
    separator: str = ""                   # between two calls
    section: tuple[str, str] | None = None   # around all the calls of a response
    json_name: bool = False               # the name is written as a JSON string
    index: bool = False                   # kimi: `:N` after the name (a regex)
    xml: bool = False                     # qwen3_coder's <parameter=NAME> arguments (xml_arguments)
    # whether the trigger only ever opens calls; llama3_json's `{"name"` also opens plain JSON
    # answers, which an "auto" grammar would turn into calls: such a format is left free in "auto"
    trigger_is_markup: bool = True

    def call_tag(self, name: str, schema: dict) -> dict:
        written = json.dumps(name, ensure_ascii=False) if self.json_name else name
        args = xml_arguments(schema) if self.xml else \
            {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_WHITESPACE}
        if self.index:
            content = {"type": "sequence", "elements": [
                {"type": "regex", "pattern": r"[0-9]{1,3}"},
                {"type": "const_string", "value": self.infix}, args]}
            return {"type": "tag", "begin": self.prefix + written + ":", "content": content,
                    "end": self.suffix}
        return {"type": "tag", "begin": self.prefix + written + self.infix, "content": args,
                "end": self.suffix}


_HERMES = CallFormat(trigger="<tool_call>", prefix='<tool_call>\n{"name": ', infix=', "arguments": ',
                     suffix="}\n</tool_call>", separator="\n", json_name=True)
_QWEN3_CODER = CallFormat(trigger="<tool_call>", prefix="<tool_call>\n<function=", infix=">\n",
                          suffix="</function>\n</tool_call>", separator="\n", xml=True)
_LLAMA3_JSON = CallFormat(trigger='{"name"', prefix='{"name": ', infix=', "parameters": ', suffix="}",
                          separator="; ", json_name=True, trigger_is_markup=False)
_MISTRAL_LIST = CallFormat(trigger="[TOOL_CALLS]", prefix='{"name": ', infix=', "arguments": ',
                           suffix="}", separator=", ", section=("[TOOL_CALLS] [", "]"), json_name=True)
_MISTRAL_ARGS = CallFormat(trigger="[TOOL_CALLS]", prefix="[TOOL_CALLS]", infix="[ARGS]", suffix="")
_DEEPSEEK_V3 = CallFormat(trigger="<｜tool▁calls▁begin｜>",
                          prefix="<｜tool▁call▁begin｜>function<｜tool▁sep｜>", infix="\n```json\n",
                          suffix="\n```<｜tool▁call▁end｜>",
                          section=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"))
_DEEPSEEK_V31 = CallFormat(trigger="<｜tool▁calls▁begin｜>", prefix="<｜tool▁call▁begin｜>",
                           infix="<｜tool▁sep｜>", suffix="<｜tool▁call▁end｜>",
                           section=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"))
_KIMI_K2 = CallFormat(trigger="<|tool_calls_section_begin|>", prefix="<|tool_call_begin|>functions.",
                      infix="<|tool_call_argument_begin|>", suffix="<|tool_call_end|>", index=True,
                      section=("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"))


def xml_arguments(schema: dict) -> dict:
    """qwen3_coder arguments, written as its parser reads them (tandem/parsers/qwen3_coder.py): one
    `<parameter=NAME>\\nVALUE\\n</parameter>\\n` per property in the schema's order, optional
    ones optional; a value the parser keeps as text (a string) is raw text (an enum: one of its
    strings; a pattern: that regex; maxLength: at most that many characters), any other value is
    JSON of its schema. (xgrammar's own qwen_xml style lets values be padded with spaces, which the
    parser keeps in strings.) A schema without properties falls back to xgrammar's style."""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return {"type": "sequence", "elements": [
            {"type": "json_schema", "json_schema": schema, "style": "qwen_xml",
             "max_whitespace_cnt": MAX_WHITESPACE}, {"type": "const_string", "value": "\n"}]}
    required = set(schema.get("required") or ())
    elements = []
    for name, sub in props.items():
        tag = {"type": "tag", "begin": f"<parameter={name}>\n", "content": _xml_value(name, sub),
               "end": "\n</parameter>\n"}
        elements.append(tag if name in required else {"type": "optional", "content": tag})
    return {"type": "sequence", "elements": elements}


def _xml_value(name: str, schema) -> dict:
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {name: schema}}}}]
    if param_kind(tool, "f", name) != "string" or not isinstance(schema, dict):
        return {"type": "json_schema", "json_schema": schema if isinstance(schema, (dict, bool)) else True,
                "max_whitespace_cnt": MAX_WHITESPACE}
    if isinstance(schema.get("enum"), list):
        return {"type": "or", "elements": [{"type": "const_string", "value": v}
                                           for v in schema["enum"] if isinstance(v, str)]}
    if isinstance(schema.get("const"), str):
        return {"type": "const_string", "value": schema["const"]}
    if isinstance(schema.get("pattern"), str):
        return {"type": "regex", "pattern": schema["pattern"]}
    text = {"type": "any_text"}
    if isinstance(schema.get("maxLength"), int):
        text["max_chars"] = schema["maxLength"]
    return text


def call_format(parser: str, chat_template: str | None) -> CallFormat:
    """The format a tool-call parser reads; the variant the model writes is read off its template."""
    template = chat_template or ""
    if parser == "hermes":
        return _HERMES
    if parser == "qwen3_coder":
        return _QWEN3_CODER
    if parser == "llama3_json":
        return _LLAMA3_JSON
    if parser == "mistral":
        return _MISTRAL_ARGS if "[ARGS]" in template else _MISTRAL_LIST
    if parser == "deepseek_v3":
        return _DEEPSEEK_V31 if "<｜tool▁sep｜>" in template and "```json" not in template \
            else _DEEPSEEK_V3
    if parser == "kimi_k2":
        return _KIMI_K2
    raise ValueError(f"no call format for tool parser {parser!r}")


def constrains_auto(tool_format: str | None, chat_template: str | None = None) -> bool:
    """Whether tool_choice "auto" gets a grammar in this format (its trigger is unambiguous markup)."""
    return tool_format is not None and call_format(tool_format, chat_template).trigger_is_markup


def arguments_schema(tool: dict) -> dict:
    """The JSON schema a call's arguments must match: the tool's parameters, always an object
    (length-bounded strings as patterns: schema_workarounds.py)."""
    params = tool["function"].get("parameters")
    if not params:
        return {"type": "object"}
    return json_safe_strings(params if "type" in params else {"type": "object", **params})


def tool_call_grammar(tool_format: str | None, tools: list[dict], mode: str, name: str | None,
                      parallel: bool, param: str = "tools", *, chat_template: str | None = None,
                      reasoning: ReasoningParser | None = None,
                      starts_in_reasoning: bool = False) -> GrammarSpec:
    """The structural tag of a response offering `tools`, for tool_choice `mode` "auto",
    "required" or "function" (naming `name`), in the format of the tool-call parser `tool_format`
    (its variant read off `chat_template`). A server with no tool-call parser cannot enforce
    calls: 400 naming `param`."""
    if tool_format is None:
        raise bad(param, "cannot be enforced: the server has no tool call parser for this model "
                  "(start it with --tool-call-parser NAME)")
    callable_tools = [t for t in tools if mode != "function" or t["function"]["name"] == name]
    if not callable_tools:
        raise bad("tool_choice", f"names function {name!r}, which is not among the tools")
    return structural_tag(call_format(tool_format, chat_template), callable_tools, mode, parallel,
                          reasoning, starts_in_reasoning)


def structural_tag(fmt: CallFormat, tools: list[dict], mode: str, parallel: bool,
                   reasoning: ReasoningParser | None = None,
                   starts_in_reasoning: bool = False) -> GrammarSpec:
    """The grammar of calls of `tools` (for "function": just the named one) in format `fmt`."""
    assert tools, "a tool grammar needs at least one tool"
    tags = [fmt.call_tag(t["function"]["name"], arguments_schema(t)) for t in tools]
    one = not parallel or mode == "function"
    calls = {"type": "tags_with_separator", "tags": tags, "separator": fmt.separator,
             "at_least_one": True, "stop_after_first": one}
    if mode == "auto":
        if fmt.section is not None:
            tags = [{"type": "tag", "begin": fmt.section[0], "content": calls, "end": fmt.section[1]}]
        body = {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags,
                "stop_after_first": one}
    elif fmt.section is not None:
        body = {"type": "sequence", "elements": [{"type": "const_string", "value": fmt.section[0]},
                                                 calls,
                                                 {"type": "const_string", "value": fmt.section[1]}]}
    else:
        body = calls
    if reasoning is not None:
        body = {"type": "sequence", "elements": [think_block(reasoning, starts_in_reasoning), body]}
    return GrammarSpec("structural_tag", json.dumps({"type": "structural_tag", "format": body},
                                                    ensure_ascii=False))


def think_block(reasoning: ReasoningParser, inside: bool) -> dict:
    """A free think block (required when the prompt opened it), then a few spaces or newlines."""
    block = {"type": "tag", "begin": "" if inside else reasoning.start,
             "content": {"type": "any_text"}, "end": reasoning.end}
    if not inside:
        block = {"type": "optional", "content": block}
    return {"type": "sequence", "elements": [block, {"type": "regex", "pattern": r"[ \n]{0,4}"}]}
