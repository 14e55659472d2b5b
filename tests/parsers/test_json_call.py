"""The JSON call object reader, through the hermes stream that hosts it."""

import pytest

from tandem.parsers.events import ToolCallArguments, ToolCallStart
from tandem.parsers.hermes import HERMES
from tests.parsers.splitting import fixed_ids


def parse(body: str):
    r = HERMES.parse(f"<tool_call>{body}</tool_call>", new_id=fixed_ids)
    return r.content, [(c.name, c.arguments) for c in r.tool_calls]


@pytest.mark.parametrize("body, calls", [
    ('{"name": "f", "arguments": {"a": 1}}', [("f", '{"a": 1}')]),
    ('{"arguments": {"a": 1}, "name": "f"}', [("f", '{"a": 1}')]),
    ('{"name": "f", "parameters": {"a": 1}}', [("f", '{"a": 1}')]),
    ('{"type": "function", "id": "x", "name": "f", "arguments": {}}', [("f", "{}")]),
    ('{"name": "f", "arguments": {"a": 1}, "parameters": {"b": 2}}', [("f", '{"a": 1}')]),    # first wins
    ('{"name": "f", "arguments": {}, "extra": [1, 2]}', [("f", "{}")]),     # after commit: ignored
    ('{"name": "f", "arguments": "{\\"a\\": [1]}"}', [("f", '{"a": [1]}')]),
    ('{"name": "f", "arguments": null}', [("f", "{}")]),
    ('{"name": "f"}', [("f", "{}")]),
])
def test_call_objects(body, calls):
    assert parse(body) == (None, calls)


@pytest.mark.parametrize("body", [
    '{"name": "", "arguments": {}}', '{"name": ["f"], "arguments": {}}', '{"extra": 1, "name": "f"}',
    '{"name": "f", "arguments": [1, 2]}', '{"name": "f", "arguments": "not json"}', '{}', '[1]',
    '{"arguments": {"a": 1}}',
])
def test_not_a_call_is_content_verbatim(body):
    assert parse(body) == (f"<tool_call>{body}</tool_call>", [])


def test_commit_waits_for_the_name_and_sends_held_arguments_with_it():
    s = HERMES.stream(new_id=fixed_ids)
    assert s.feed('<tool_call>{"arguments": {"a": "xyz') == []
    assert s.feed('"}, "name": "') == []
    assert s.feed('f"') == [ToolCallStart(0, "call_0", "f"), ToolCallArguments(0, '{"a": "xyz"}')]


def test_commit_as_soon_as_an_object_argument_starts():
    s = HERMES.stream(new_id=fixed_ids)
    assert s.feed('<tool_call>{"name": "f", "arguments": ') == []
    assert s.feed('{"a') == [ToolCallStart(0, "call_0", "f"), ToolCallArguments(0, "{")]
