import json

from tandem.parsers import ContentDelta, ReasoningDelta, ToolCallArguments, ToolCallStart
from tandem.api.openai.responses_format import ResponseBuilder
from tandem.turn.turn_output import TurnOutput
from tandem.types import FinishReason, RequestDelta

ECHO = {"instructions": None, "tools": [], "tool_choice": "auto"}
EVENTS = [ReasoningDelta("think"), ContentDelta("Hel"), ContentDelta("lo"), ToolCallStart(0, "call_1", "f"),
          ToolCallArguments(0, '{"a": '), ToolCallArguments(0, "1}")]


def finished(reason=FinishReason.STOP) -> TurnOutput:
    out = TurnOutput(None, prompt_len=10)
    out.feed(RequestDelta("r", [5, 6, 7], "", finished=True, finish_reason=reason, num_prompt_tokens=10,
                          num_cached_tokens=4, num_output_tokens=3))
    return out


def sse_events(data: bytes) -> list[dict]:
    out = []
    for block in data.decode().split("\n\n"):
        if block:
            kind, payload = block.split("\n")
            event = json.loads(payload.removeprefix("data: "))
            assert kind == "event: " + event["type"]
            out.append(event)
    return out


def test_items_open_in_order_and_the_response_holds_them():
    b = ResponseBuilder("resp_1", "m", ECHO, {"temperature": 1.0, "top_p": 1.0}, stream=False)
    assert b.start() == b"" and b.add(EVENTS) == b""
    b.finish(finished())
    r = b.final
    assert r["status"] == "completed" and r["incomplete_details"] is None and r["object"] == "response"
    assert [o["type"] for o in r["output"]] == ["reasoning", "message", "function_call"]
    reasoning, message, call = r["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "think"}]
    assert message["content"] == [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]
    assert (call["call_id"], call["name"], call["arguments"], call["status"]) == \
        ("call_1", "f", '{"a": 1}', "completed")
    assert r["usage"] == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
                          "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": 13}
    assert r["temperature"] == 1.0 and r["tool_choice"] == "auto"


def test_stream_event_sequence():
    b = ResponseBuilder("resp_1", "m", ECHO, {}, stream=True)
    data = b.start() + b.add(EVENTS) + b.finish(finished())
    events = sse_events(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    text_done = next(e for e in events if e["type"] == "response.output_text.done")
    assert (text_done["text"], text_done["output_index"]) == ("Hello", 1)
    args_done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert (args_done["arguments"], args_done["output_index"]) == ('{"a": 1}', 2)
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"]["id"] for e in added] == [e["item"]["id"] for e in done]
    assert events[-1]["response"] == b.final


def test_length_cut_makes_the_response_incomplete():
    b = ResponseBuilder("resp_1", "m", ECHO, {}, stream=True)
    events = sse_events(b.start() + b.add([ContentDelta("Hi")]) + b.finish(finished(FinishReason.LENGTH)))
    assert events[-1]["type"] == "response.incomplete"
    assert b.final["status"] == "incomplete"
    assert b.final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert b.final["output"][0]["status"] == "incomplete"
