"""Resolving --tool-call-parser / --reasoning-parser: detection from the chat template, "none",
clear errors for unknown names, and the flags `tandem up` passes on."""

from __future__ import annotations

import argparse

import pytest

from tandem.parsers import TOOL_PARSER_NAMES
from tandem.testing.tiny_tokenizer import CHAT_TEMPLATE
from tandem.turn.parser_setup import (
    ParserSetup,
    add_parser_flags,
    parser_flag_args,
    parser_settings,
    reasoning_parser_arg,
    tool_parser_arg,
)


class _Tok:
    def __init__(self, template):
        self.chat_template = template


def test_auto_detects_the_format_from_the_template():
    assert ParserSetup.resolve("auto", None, _Tok(CHAT_TEMPLATE)).tool_call_parser == "hermes"
    assert ParserSetup.resolve("auto", None, _Tok("{{ messages }}")).tool_call_parser is None
    assert ParserSetup.resolve("auto", None, _Tok(None)).tool_call_parser is None
    assert ParserSetup.resolve("none", None, _Tok(CHAT_TEMPLATE)).tool_call_parser is None
    s = ParserSetup.resolve("mistral", "qwen3", _Tok(CHAT_TEMPLATE))
    assert (s.tool_call_parser, s.reasoning_parser, s.chat_template) == ("mistral", "qwen3", CHAT_TEMPLATE)
    assert s.output_parser(with_tools=False).tool is None
    assert s.output_parser(with_tools=True).tool.name == "mistral"
    assert ParserSetup().output_parser(with_tools=True) is None


def test_the_tokenizers_special_tokens_are_read(llama_dir):
    from tandem.tokenization.tokenizer import Tokenizer
    s = ParserSetup.resolve("auto", None, Tokenizer.from_dir(llama_dir))
    assert "<|im_start|>" in s.special_tokens and "<tool_call>" not in s.special_tokens


def test_unknown_names_list_the_known_ones():
    with pytest.raises(argparse.ArgumentTypeError) as info:
        tool_parser_arg("hermes2")
    assert all(n in str(info.value) for n in TOOL_PARSER_NAMES + ("auto", "none"))
    with pytest.raises(argparse.ArgumentTypeError) as info:
        reasoning_parser_arg("r1")
    assert "deepseek_r1" in str(info.value)
    assert reasoning_parser_arg("none") is None and tool_parser_arg("kimi_k2") == "kimi_k2"


def test_flags_become_settings_and_are_passed_on():
    p = argparse.ArgumentParser()
    add_parser_flags(p)
    args = p.parse_args(["--tool-call-parser", "llama3_json", "--reasoning-parser", "deepseek_r1",
                         "--enable-auto-tool-choice", "--no-auto-tool-grammar", "--no-tool-call-guard"])
    assert parser_settings(args) == {"tool_call_parser": "llama3_json", "reasoning_parser": "deepseek_r1",
                                     "constrain_auto_tool_calls": False, "tool_call_guard": False}
    assert parser_settings(p.parse_args([])) == {"tool_call_parser": "auto", "reasoning_parser": None,
                                                 "constrain_auto_tool_calls": True, "tool_call_guard": True}
    with pytest.raises(SystemExit):
        p.parse_args(["--tool-call-parser", "nope"])
    assert parser_flag_args("hermes", None) == ("--tool-call-parser=hermes",)
    assert parser_flag_args(None, "qwen3") == ("--reasoning-parser=qwen3",)
