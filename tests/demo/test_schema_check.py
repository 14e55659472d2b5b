from __future__ import annotations

from tandem_demo.schema_check import check_tool_call, check_tool_call_turn, validate
from tandem_demo.tools import tool_catalog, tools_by_name

SCHEMAS = tools_by_name(tool_catalog())


def test_valid_arguments_pass():
    assert validate({"city": "Paris", "unit": "celsius"}, SCHEMAS["get_weather"]) == []
    assert validate({"title": "x", "date": "2025-01-02", "attendees": ["A", "B"]},
                    SCHEMAS["create_calendar_event"]) == []


def test_each_violation_is_reported():
    s = SCHEMAS["create_calendar_event"]
    assert "missing required property 'date'" in validate({"title": "x"}, s)[0]
    assert "does not match" in validate({"title": "x", "date": "May 1"}, s)[0]
    assert "expected integer" in validate({"title": "x", "date": "2025-01-02", "duration_minutes": "5"}, s)[0]
    assert "> maximum" in validate({"title": "x", "date": "2025-01-02", "duration_minutes": 999}, s)[0]
    assert "expected string" in validate({"title": "x", "date": "2025-01-02", "attendees": [3]}, s)[0]
    assert "unexpected property 'where'" in validate({"title": "x", "date": "2025-01-02", "where": "y"}, s)[0]
    assert "is not one of" in validate({"city": "Paris", "unit": "kelvin"}, SCHEMAS["get_weather"])[0]


def test_bool_is_not_an_integer_and_int_is_a_number():
    assert validate(True, {"type": "integer"}) == ["$: expected integer, got bool"]
    assert validate(3, {"type": "number"}) == []


def test_check_tool_call():
    ok = check_tool_call('{"name": "calculator", "arguments": {"expression": "1 + 2"}}', SCHEMAS)
    assert ok.ok and ok.name == "calculator" and ok.arguments == {"expression": "1 + 2"}
    assert not check_tool_call('{"name": "calculator", "arguments": {"expression": "1 + 2"}', SCHEMAS).ok
    assert "unknown tool" in check_tool_call('{"name": "fly", "arguments": {}}', SCHEMAS).reason
    assert not check_tool_call('{"name": "calculator", "arguments": {}}', SCHEMAS).ok
    assert not check_tool_call('{"name": "calculator"}', SCHEMAS).ok


def test_turn_needs_a_block_and_every_block_counts():
    assert not check_tool_call_turn("It is sunny.", SCHEMAS)[0].ok
    text = ('<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    assert [c.ok for c in check_tool_call_turn(text, SCHEMAS)] == [True, False]
