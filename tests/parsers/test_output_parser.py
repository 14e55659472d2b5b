import pytest
from hypothesis import given, settings

from tandem.parsers.events import ContentDelta, ParsedOutput, ReasoningDelta, ToolCall, collect
from tandem.parsers.output_parser import OutputParser
from tandem.parsers.reasoning import make_reasoning_parser
from tandem.parsers.tool_registry import make_tool_parser
from tests.parsers.splitting import CUTS, check_well_formed, fixed_ids, pieces, run_stream

QWEN = OutputParser(make_reasoning_parser("qwen3"), make_tool_parser("hermes"))
KIMI = OutputParser(make_reasoning_parser("kimi_k2"), make_tool_parser("kimi_k2"))
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

EXAMPLES = [
    (QWEN, "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n" + CALL,
     ParsedOutput("The user wants weather.", "Let me check.\n", [ToolCall("call_0", "get_weather", '{"city": "Paris"}')])),
    (QWEN, "<think>\nhm\n</think>\n\n" + CALL, ParsedOutput("hm", None, [ToolCall("call_0", "get_weather", '{"city": "Paris"}')])),
    (QWEN, "<think>\nA <tool_call> mentioned in thought.\n</think>\nNo call.",
     ParsedOutput("A <tool_call> mentioned in thought.", "No call.", [])),
    (QWEN, "Just text.", ParsedOutput(None, "Just text.", [])),
    (KIMI, "I should call it.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
           '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
     ParsedOutput("I should call it.", None, [ToolCall("functions.get_weather:0", "get_weather", '{"city": "Paris"}')])),
    (OutputParser(None, make_tool_parser("hermes")), "Hi\n" + CALL,
     ParsedOutput(None, "Hi\n", [ToolCall("call_0", "get_weather", '{"city": "Paris"}')])),
    (OutputParser(make_reasoning_parser("deepseek_r1"), None), "why</think>\n" + CALL,
     ParsedOutput("why", CALL, [])),
    (OutputParser(), "  plain  ", ParsedOutput(None, "  plain  ", [])),
]


@pytest.mark.parametrize("parser, text, expected", EXAMPLES)
def test_parse_exact(parser, text, expected):
    assert parser.parse(text, new_id=fixed_ids) == expected


@pytest.mark.parametrize("parser, text, expected", EXAMPLES)
@settings(derandomize=True, max_examples=30)
@given(cuts=CUTS)
def test_stream_equals_parse_for_any_split(parser, text, expected, cuts):
    events = run_stream(parser.stream(new_id=fixed_ids), pieces(text, cuts))
    check_well_formed(events)
    assert collect(events) == expected


def test_events_come_in_output_order():
    s = QWEN.stream(new_id=fixed_ids)
    events = s.feed("<think>\nwhy\n</think>\n\nOk.\n" + CALL) + s.finish()
    assert events[:2] == [ReasoningDelta("why"), ContentDelta("Ok.\n")]
    assert s.num_tool_calls == 1


def test_special_tokens_need():
    assert KIMI.requires_special_tokens and not QWEN.requires_special_tokens
    assert OutputParser(make_reasoning_parser("qwen3"), make_tool_parser("mistral")).requires_special_tokens
    assert not QWEN.keeps_special_tokens({"<|im_start|>", "<|im_end|>", "<|endoftext|>"})   # the demo tokenizer
    assert QWEN.keeps_special_tokens({"<|im_end|>", "<tool_call>"})
    assert not OutputParser().keeps_special_tokens({"<tool_call>"})
