"""Rules every tool stream shares (tool_stream.py), checked on the simplest format."""

from tandem.parsers.events import ContentDelta, ParsedTools, ToolCall
from tandem.parsers.hermes import HERMES, HermesStream
from tandem.parsers.tool_stream import ToolParser
from tests.parsers.splitting import fixed_ids

CALL = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'


def test_parse_is_feed_then_finish():
    s = HERMES.stream(new_id=fixed_ids)
    events = s.feed("Hi " + CALL) + s.finish()
    assert events[0] == ContentDelta("Hi ")
    assert HERMES.parse("Hi " + CALL, new_id=fixed_ids) == ParsedTools("Hi ", [ToolCall("call_0", "f", '{"a": 1}')])


def test_partial_markers_are_held_until_decided():
    s = HERMES.stream(new_id=fixed_ids)
    assert s.feed("Hello <tool") == [ContentDelta("Hello ")]
    assert s.feed("box>") == [ContentDelta("<toolbox>")]
    assert s.feed("</tool_") == []
    assert s.finish() == [ContentDelta("</tool_")]


def test_whitespace_between_calls_is_dropped_text_is_kept():
    text = "\n" + CALL + "\n\n" + CALL + "\n"
    assert HERMES.parse(text).content is None
    assert HERMES.parse(CALL + "\nThat is all.").content == "\nThat is all."


def test_stray_end_markers_are_markup():
    assert HERMES.parse("before</tool_call> after").content == "before after"


def test_nothing_is_lost_when_unterminated():
    for text in ("<tool_call>", "<tool_call>\n{", '<tool_call>\n{"name"', "<tool_call>\n{\"name\": \"f\", "):
        assert HERMES.parse(text).content == text


def test_truncated_call_is_kept_with_closed_arguments():
    r = HERMES.parse('<tool_call>{"name": "f", "arguments": {"a": ["x", "y')
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("f", '{"a": ["x", "y"]}')]


def test_num_calls_and_parser_description():
    s = HERMES.stream()
    s.feed(CALL + CALL)
    s.finish()
    assert s.num_calls == 2
    assert isinstance(HERMES, ToolParser) and HERMES.stream_class is HermesStream
    assert HERMES.start_markers == ("<tool_call>",)
    assert HERMES.markers == ("<tool_call>", "</tool_call>")
    assert HERMES.requires_special_tokens is False
