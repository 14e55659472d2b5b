"""What tools and structured-output fields make of a chat request: which grammar, which parsers,
special tokens kept or not; and the 400s for combinations that cannot be served."""

from __future__ import annotations

import json

import pytest

from tandem.errors import InvalidRequest
from tandem.turn.chat_plan import ChatPlan, plan_chat
from tandem.turn.parser_setup import ParserSetup
from tandem.turn.tool_request import ToolRequest
from tandem.types import GrammarSpec, ParserOptions

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
HERMES = ParserSetup("hermes")
JSON = GrammarSpec("json_object")
GUARD = GrammarSpec("structural_tag", json.dumps(
    {"type": "structural_tag", "format": {"type": "any_text", "excludes": ["<tool_call>"]}}), trusted=True)


def test_no_tools_no_parser_passes_text_through_under_the_guard():
    plan = plan_chat(HERMES, ToolRequest(), None, None, "")
    assert plan.output is None and plan.parser_options == ParserOptions()
    assert plan.grammar == GUARD and plan.grammar_param is None
    # a structured output already keeps the opening out: it alone is enforced
    plan = plan_chat(HERMES, ToolRequest(), JSON, "response_format", "")
    assert (plan.grammar, plan.grammar_param) == (JSON, "response_format")
    # turned off, or no tool-call parser: nothing to guard
    assert plan_chat(ParserSetup("hermes", tool_call_guard=False), ToolRequest(), None, None, "").grammar is None
    assert plan_chat(ParserSetup(None), ToolRequest(), None, None, "").grammar is None


def test_auto_parses_calls_and_holds_them_to_the_tools():
    plan = plan_chat(HERMES, ToolRequest(TOOLS, "auto"), None, None, "")
    assert plan.output.parses_tools and plan.output.tools == TOOLS
    assert plan.grammar.kind == "structural_tag" and plan.grammar_param == "tools"
    assert json.loads(plan.grammar.text)["format"]["type"] == "triggered_tags"
    assert plan.parser_options == ParserOptions("hermes", None)
    off = ParserSetup("hermes", constrain_auto_tool_calls=False)
    assert plan_chat(off, ToolRequest(TOOLS, "auto"), None, None, "").grammar is None
    # llama3_json calls open like any JSON answer: "auto" leaves them free, forced calls do not
    llama = ParserSetup("llama3_json")
    assert plan_chat(llama, ToolRequest(TOOLS, "auto"), None, None, "").grammar is None
    assert plan_chat(llama, ToolRequest(TOOLS, "required"), None, None, "").grammar is not None
    # a response_format wins over the auto constraint
    assert plan_chat(HERMES, ToolRequest(TOOLS, "auto"), JSON, "response_format", "").grammar == JSON


def test_required_and_named_force_calls():
    plan = plan_chat(HERMES, ToolRequest(TOOLS, "required"), None, None, "")
    assert json.loads(plan.grammar.text)["format"]["type"] == "tags_with_separator"
    plan = plan_chat(HERMES, ToolRequest(TOOLS, "function", "f"), None, None, "")
    assert json.loads(plan.grammar.text)["format"]["stop_after_first"] is True


def test_none_keeps_tools_out_of_parsing_and_guards():
    plan = plan_chat(HERMES, ToolRequest(TOOLS, "none"), None, None, "")
    assert plan.output is None and plan.grammar == GUARD
    # with a reasoning parser the guard comes with the reasoning split
    plan = plan_chat(ParserSetup("hermes", "qwen3"), ToolRequest(TOOLS, "none"), None, None, "")
    assert plan.output.parses_reasoning and not plan.output.parses_tools and plan.grammar == GUARD


def test_reasoning_parser_reads_the_prompt_and_special_markers_keep_special_tokens():
    setup = ParserSetup("kimi_k2", "kimi_k2", special_tokens=frozenset({"<|tool_call_begin|>"}))
    plan = plan_chat(setup, ToolRequest(TOOLS, "auto"), None, None, "<|im_assistant|>assistant<think>")
    assert plan.output.starts_in_reasoning is True and plan.keep_special_tokens
    assert plan.parser_options == ParserOptions("kimi_k2", "kimi_k2")
    qwen = ParserSetup(None, "qwen3")   # no tool-call parser: no guard either
    plan = plan_chat(qwen, ToolRequest(), None, None, "<think>\n\n</think>\n\n")
    assert plan.output.parses_reasoning and plan.output.starts_in_reasoning is False
    assert not plan.keep_special_tokens and plan.grammar is None


@pytest.mark.parametrize("setup,tools,structured,param", [
    (HERMES, ToolRequest(TOOLS, "required"), JSON, "response_format"),
    (ParserSetup(None), ToolRequest(TOOLS, "function", "f"), JSON, "response_format"),
])
def test_what_cannot_be_served_is_a_400(setup, tools, structured, param):
    with pytest.raises(InvalidRequest) as info:
        plan_chat(setup, tools, structured, "response_format" if structured else None, "")
    assert info.value.param == param and info.value.status == 400


def test_forcing_a_call_without_a_tool_call_parser_writes_plain_json():
    none = ParserSetup(None)
    plan = plan_chat(none, ToolRequest(TOOLS, "required"), None, None, "")
    assert plan.output.parser.tool.name == "json_list" and plan.grammar_param == "tools"
    assert json.loads(plan.grammar.text)["format"]["json_schema"]["type"] == "array"
    assert plan.parser_options == ParserOptions("json_list", None)
    plan = plan_chat(none, ToolRequest(TOOLS, "function", "f"), None, None, "")
    assert plan.output.parser.tool.name == "json_arguments" and plan.output.tools == TOOLS
    assert json.loads(plan.grammar.text)["format"]["json_schema"] == {"type": "object"}
    # "auto" stays free text, as before
    assert plan_chat(none, ToolRequest(TOOLS, "auto"), None, None, "") == ChatPlan()
    # a reasoning parser: a think block may come first
    plan = plan_chat(ParserSetup(None, "qwen3"), ToolRequest(TOOLS, "required"), None, None, "<think>\n")
    assert plan.output.starts_in_reasoning is True and plan.output.parses_reasoning
    assert json.loads(plan.grammar.text)["format"]["elements"][0]["elements"][0]["begin"] == ""
