"""Reading tools, tool_choice and parallel_tool_calls: defaults, the two tool shapes, and a 400
naming the parameter for everything malformed."""

from __future__ import annotations

import pytest

from tandem.errors import InvalidRequest
from tandem.turn.fields import Fields
from tandem.turn.tool_request import ToolRequest, read_tools

FN = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
TOOL = {"type": "function", "function": FN}


def read(flat: bool = False, **body) -> ToolRequest:
    return read_tools(Fields(body), flat=flat)


def test_defaults_follow_openai():
    assert read() == ToolRequest(None, "none", None, True)
    t = read(tools=[TOOL])
    assert t.tools == [TOOL] and t.choice == "auto" and t.parse_calls and not t.forced
    assert read(tools=[]).tools is None
    assert not read(tools=[TOOL], tool_choice="none").parse_calls


def test_required_named_and_parallel():
    other = {"type": "function", "function": {"name": "set_timer"}}
    t = read(tools=[TOOL, other], tool_choice="required", parallel_tool_calls=False)
    assert t.forced and t.choice == "required" and not t.parallel
    assert t.callable_tools() == [TOOL, other]
    t = read(tools=[TOOL, other], tool_choice={"type": "function", "function": {"name": "set_timer"}})
    assert (t.choice, t.function, t.forced) == ("function", "set_timer", True)
    assert t.callable_tools() == [other]


def test_workers_ai_flat_tools_become_openai_tools():
    t = read(flat=True, tools=[FN])
    assert t.tools == [{"type": "function", "function": FN}]
    with pytest.raises(InvalidRequest):
        read(tools=[FN])   # the OpenAI routes take only OpenAI's shape


@pytest.mark.parametrize("body,param", [
    ({"tools": "f"}, "tools"),
    ({"tools": [5]}, "tools[0]"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools[0].function.name"),
    ({"tools": [TOOL, TOOL]}, "tools[1].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": 5}}]},
     "tools[0].function.description"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": {"type": "function"}}, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
    ({"tools": [TOOL], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
])
def test_malformed_values_name_the_parameter(body, param):
    with pytest.raises(InvalidRequest) as info:
        read(**body)
    assert info.value.status == 400 and info.value.param == param, info.value.message
