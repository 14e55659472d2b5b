import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tandem.errors import InvalidRequest
from tandem.parsers.tool_registry import TOOL_PARSER_NAMES, UnknownParser, detect_tool_parser, make_tool_parser
from tests.parsers.splitting import CUTS, assert_tools_split_invariant

DEMO = Path(__file__).resolve().parents[2] / "models" / "tandem-demo-target" / "chat_template.jinja"


def test_names_are_vllms():
    assert TOOL_PARSER_NAMES == ("hermes", "llama3_json", "mistral", "deepseek_v3", "kimi_k2", "qwen3_coder")
    for name in TOOL_PARSER_NAMES:
        assert make_tool_parser(name).name == name


def test_unknown_name_is_a_clear_error():
    with pytest.raises(UnknownParser) as e:
        make_tool_parser("hermes2")
    assert isinstance(e.value, InvalidRequest) and isinstance(e.value, ValueError)
    assert e.value.status == 400 and e.value.param == "tool_call_parser"
    assert "'hermes2'" in str(e.value) and "qwen3_coder" in str(e.value)


@pytest.mark.skipif(not DEMO.exists(), reason="demo model not present")
def test_demo_template_is_hermes():
    assert detect_tool_parser(DEMO.read_text()) == "hermes"


@pytest.mark.parametrize("template, name", [
    ('{{- "<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>" }}', "hermes"),
    ("{{ '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{ '<parameter=' + k + '>' }}", "qwen3_coder"),
    ("{{ '<|tool_calls_section_begin|>' }}{% for tc in tool_calls %}<|tool_call_begin|>", "kimi_k2"),
    ("{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>'}}", "deepseek_v3"),
    ("{{- '[TOOL_CALLS][' }}{{ tool_call.function.name }}", "mistral"),
    ("{{- '<|python_tag|>' + tool_call.name }}<|eom_id|>", "llama3_json"),
    ('<|start_header_id|>user<|end_header_id|> Respond in the format {"name": function name, "parameters": dict}', "llama3_json"),
    ("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", None),
    ("", None),
    (None, None),
])
def test_detect_from_template(template, name):
    assert detect_tool_parser(template) == name


# -- every parser on arbitrary mixes of all the formats' markup: never raises, always split-invariant --
_MARKUP = sorted({m for n in TOOL_PARSER_NAMES for m in make_tool_parser(n).markers})
_PIECES = st.sampled_from(_MARKUP + [
    "{", "}", "[", "]", '"', ":", ",", " ", "\n", "a", "1", "-", ".", "\\", "null", "true", '"name"', '"f"',
    '"arguments"', '"parameters"', "<function=f>", "<parameter=x>", "functions.f:0", "f", "```json", "é",
    '{"name": "f", "arguments": {', '"x": "y"', "<", ">", "function", "[ARGS]"])
_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"x": {"type": "integer"}}}}}]


@settings(derandomize=True, max_examples=300)
@given(name=st.sampled_from(TOOL_PARSER_NAMES), parts=st.lists(_PIECES, max_size=40), cuts=CUTS)
def test_any_markup_soup_parses_without_error_the_same_streamed(name, parts, cuts):
    result = assert_tools_split_invariant(make_tool_parser(name), "".join(parts), cuts, _TOOLS)
    for call in result.tool_calls:
        assert call.name and isinstance(json.loads(call.arguments), dict)
