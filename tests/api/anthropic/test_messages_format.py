import json

from tandem.errors import InvalidRequest
from tandem.parsers import ContentDelta, ReasoningDelta, ToolCallArguments, ToolCallStart
from tandem.api.anthropic.messages_format import MessageBuilder
from tandem.turn.turn_output import TurnOutput
from tandem.types import FinishReason, RequestDelta


def output(events_calls: int = 0, reason=FinishReason.STOP) -> TurnOutput:
    out = TurnOutput(None, prompt_len=10)
    out.feed(RequestDelta("r", [5, 6, 7], "", finished=True, finish_reason=reason, num_prompt_tokens=10,
                          num_cached_tokens=4, num_output_tokens=3))
    out.num_tool_calls = events_calls
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


EVENTS = [ReasoningDelta("hmm"), ContentDelta("Hi "), ContentDelta("there"), ToolCallStart(0, "toolu_1", "f"),
          ToolCallArguments(0, '{"a": '), ToolCallArguments(0, "1}")]


def test_blocks_and_the_message():
    out = output(events_calls=1)
    b = MessageBuilder("msg_1", "m", stream=False)
    assert b.add(EVENTS, out) == b""
    b.finish(out, None)
    assert b.final == {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "thinking", "thinking": "hmm", "signature": ""},
                    {"type": "text", "text": "Hi there"},
                    {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 6, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4,
                  "output_tokens": 3}}


def test_stream_events():
    out = output(events_calls=1)
    b = MessageBuilder("msg_1", "m", stream=True)
    events = sse_events(b.add(EVENTS, out) + b.finish(out, None))
    assert [e["type"] for e in events] == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 6 and start["usage"]["output_tokens"] == 0
    assert [e["content_block"] for e in events if e["type"] == "content_block_start"] == [
        {"type": "thinking", "thinking": "", "signature": ""}, {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]
    deltas = [e for e in events if e["type"] == "content_block_delta"]
    assert deltas[0]["delta"] == {"type": "thinking_delta", "thinking": "hmm"}
    assert deltas[1] == {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi "}}
    assert "".join(d["delta"]["partial_json"] for d in deltas[3:]) == '{"a": 1}'
    assert {d["index"] for d in deltas[3:]} == {2}
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 3


def test_stop_reasons():
    for calls, reason, seq, expect in [(0, FinishReason.STOP, None, ("end_turn", None)),
                                       (0, FinishReason.STOP, "END", ("stop_sequence", "END")),
                                       (1, FinishReason.LENGTH, None, ("max_tokens", None)),
                                       (1, FinishReason.STOP, None, ("tool_use", None))]:
        out = output(calls, reason)
        b = MessageBuilder("msg_1", "m", stream=False)
        b.add([ContentDelta("x")], out)
        b.finish(out, seq)
        assert (b.final["stop_reason"], b.final["stop_sequence"]) == expect


def test_failure_event():
    b = MessageBuilder("msg_1", "m", stream=True)
    [event] = sse_events(b.fail(InvalidRequest("bad thing"), 400))
    assert event == {"type": "error", "error": {"type": "invalid_request_error", "message": "bad thing"}}
