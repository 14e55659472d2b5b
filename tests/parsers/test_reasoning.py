import pytest
from hypothesis import given, settings

from tandem.parsers.events import ParsedOutput, ReasoningDelta, collect
from tandem.parsers.reasoning import REASONING_PARSER_NAMES, make_reasoning_parser
from tandem.parsers.tool_registry import UnknownParser
from tests.parsers.splitting import CUTS, check_well_formed, pieces, run_stream

R1, QWEN3, KIMI = (make_reasoning_parser(n) for n in ("deepseek_r1", "qwen3", "kimi_k2"))

EXAMPLES = [
    # (parser, output, reasoning, content)
    (QWEN3, "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?", "The user greets me.", "Hello! How can I help?"),
    (QWEN3, "Hello without thinking.", None, "Hello without thinking."),
    (QWEN3, "<think>\n\n</think>\n\nDirect answer.", None, "Direct answer."),
    (QWEN3, "<think>\nStill thinking when max_tokens hit", "Still thinking when max_tokens hit", None),
    (QWEN3, "Text then <think>x</think> y", None, "Text then <think>x</think> y"),
    (QWEN3, "  <thi", None, "  <thi"),
    (R1, "The prompt opened <think>; I reason.\n</think>\n\nAnswer: 4", "The prompt opened <think>; I reason.", "Answer: 4"),
    (R1, "<think>\nI reason.\n</think>Answer", "I reason.", "Answer"),
    (R1, "Never closed", "Never closed", None),
    (R1, "</think>only content", None, "only content"),
    (KIMI, "Need the weather.<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0", "Need the weather.",
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"),
    (KIMI, "<think>a</think>b", "a", "b"),
    (KIMI, "<think>\n</think>\n<|tool_calls_section_begin|>", None, "<|tool_calls_section_begin|>"),
]


@pytest.mark.parametrize("parser, text, reasoning, content", EXAMPLES)
def test_parse_exact(parser, text, reasoning, content):
    assert parser.parse(text) == (reasoning, content)


@pytest.mark.parametrize("parser, text", [(p, t) for p, t, _, _ in EXAMPLES])
@settings(derandomize=True, max_examples=30)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(parser, text, cuts):
    events = run_stream(parser.stream(), pieces(text, cuts))
    check_well_formed(events)
    assert collect(events) == ParsedOutput(*parser.parse(text), [])


def test_where_the_output_starts_can_be_told_or_read_from_the_prompt():
    assert QWEN3.parse("I reason.</think>Answer", starts_in_reasoning=True) == ("I reason.", "Answer")
    assert R1.parse("Plain answer", starts_in_reasoning=False) == (None, "Plain answer")
    assert QWEN3.prompt_starts_in_reasoning("<|im_start|>assistant\n<think>\n") is True
    assert R1.prompt_starts_in_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n") is False
    assert R1.prompt_starts_in_reasoning("<｜Assistant｜>") is True      # the parser's default
    assert QWEN3.prompt_starts_in_reasoning("<|im_start|>assistant\n") is False


def test_reasoning_streams_as_it_comes():
    s = QWEN3.stream()
    assert s.feed("<think>\nStep one") == [ReasoningDelta("Step one")]
    assert s.feed(", step two.\n</thi") == [ReasoningDelta(", step two.")]


def test_names_and_errors():
    assert REASONING_PARSER_NAMES == ("deepseek_r1", "qwen3", "kimi_k2")
    with pytest.raises(UnknownParser, match="known parsers: deepseek_r1, qwen3, kimi_k2"):
        make_reasoning_parser("r1")
    assert KIMI.requires_special_tokens and not QWEN3.requires_special_tokens
    assert "<|tool_calls_section_begin|>" in KIMI.markers
