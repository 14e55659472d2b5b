"""Parser events of one turn -> an Anthropic Message and its stream of SSE events.

Content blocks open in the order the events come: `thinking` (reasoning), `text`, `tool_use`
(one per call, its input streamed as `input_json_delta` fragments of the JSON object); an event of
another kind closes the open block. Streamed: `message_start` (the message with empty content and
the input usage), `ping`, then per block `content_block_start` -> `content_block_delta`... ->
`content_block_stop`, then `message_delta` (stop_reason, stop_sequence, usage) and
`message_stop`; each framed `event: TYPE` / `data: JSON` as Anthropic sends them.

stop_reason: `max_tokens` when the length ran out, else `tool_use` when the turn called a tool,
else `stop_sequence` (with the matched `stop_sequence`), else `end_turn`.
Usage follows Anthropic's meaning: `input_tokens` are the prompt tokens not read from the prefix
cache, `cache_read_input_tokens` those that were (their sum is the prompt).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

import orjson

from tandem.api.errors import anthropic_error_body
from tandem.errors import TandemError
from tandem.parsers import ContentDelta, Event, ReasoningDelta, ToolCallArguments, ToolCallStart
from tandem.turn.turn_output import TurnOutput
from tandem.types import FinishReason


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def tool_use_id(index: int = 0) -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def sse(kind: str, payload: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


@dataclass
class _Block:
    kind: str                     # "text" | "thinking" | "tool_use"
    index: int
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def start_dict(self) -> dict:
        if self.kind == "text":
            return {"type": "text", "text": ""}
        if self.kind == "thinking":
            return {"type": "thinking", "thinking": "", "signature": ""}
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": {}}

    def to_dict(self) -> dict:
        if self.kind == "text":
            return {"type": "text", "text": self.text}
        if self.kind == "thinking":
            return {"type": "thinking", "thinking": self.text, "signature": ""}
        return {"type": "tool_use", "id": self.id, "name": self.name, "input": _input(self.text)}


def _input(arguments: str) -> dict:
    """A call's arguments as an object (the parsers always close them into valid JSON)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def usage_dict(out: TurnOutput) -> dict:
    return {"input_tokens": out.prompt_tokens - out.cached_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": out.cached_tokens,
            "output_tokens": out.output_tokens}


class MessageBuilder:
    """One message across its events. With `stream`, each call returns the SSE bytes to send."""

    def __init__(self, msg_id: str, model: str, stream: bool) -> None:
        self.id = msg_id
        self.model = model
        self.stream = stream
        self.blocks: list[_Block] = []
        self._open: _Block | None = None
        self._calls: dict[int, _Block] = {}
        self._started = False
        self._out: list[bytes] = []
        self.final: dict | None = None        # the Message, once finished

    def _emit(self, kind: str, **payload) -> None:
        if self.stream:
            self._out.append(sse(kind, {"type": kind, **payload}))

    def _take(self) -> bytes:
        data, self._out = b"".join(self._out), []
        return data

    def message(self, out: TurnOutput, stop_reason: str | None, stop_sequence: str | None) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [b.to_dict() for b in self.blocks], "stop_reason": stop_reason,
                "stop_sequence": stop_sequence, "usage": usage_dict(out)}

    def add(self, events: list[Event], out: TurnOutput) -> bytes:
        if not self._started:   # after the first delta: its counts are known
            self._started = True
            start = self.message(out, None, None)
            start["content"] = []
            start["usage"]["output_tokens"] = 0
            self._emit("message_start", message=start)
            self._emit("ping")
        for ev in events:
            if isinstance(ev, ContentDelta):
                block = self._ensure("text")
                block.parts.append(ev.text)
                self._emit("content_block_delta", index=block.index,
                           delta={"type": "text_delta", "text": ev.text})
            elif isinstance(ev, ReasoningDelta):
                block = self._ensure("thinking")
                block.parts.append(ev.text)
                self._emit("content_block_delta", index=block.index,
                           delta={"type": "thinking_delta", "thinking": ev.text})
            elif isinstance(ev, ToolCallStart):
                self._close()
                self._calls[ev.index] = self._open_block("tool_use", ev.id, ev.name)
            elif isinstance(ev, ToolCallArguments):
                block = self._calls[ev.index]
                block.parts.append(ev.fragment)
                self._emit("content_block_delta", index=block.index,
                           delta={"type": "input_json_delta", "partial_json": ev.fragment})
        return self._take()

    def finish(self, out: TurnOutput, stop_sequence: str | None) -> bytes:
        """Close the open block and end the stream; the final object is `self.final`."""
        self._close()
        if out.finish_reason is FinishReason.LENGTH:
            reason = "max_tokens"
        elif out.num_tool_calls:
            reason = "tool_use"
        elif stop_sequence is not None:
            reason = "stop_sequence"
        else:
            reason = "end_turn"
        stop_sequence = stop_sequence if reason == "stop_sequence" else None
        self.final = self.message(out, reason, stop_sequence)
        self._emit("message_delta", delta={"stop_reason": reason, "stop_sequence": stop_sequence},
                   usage=usage_dict(out))
        self._emit("message_stop")
        return self._take()

    def fail(self, err: TandemError, status: int) -> bytes:
        """An error after the stream began: one `error` event (Anthropic's shape)."""
        self._emit("error", error=anthropic_error_body(err, status)["error"])
        return self._take()

    def _ensure(self, kind: str) -> _Block:
        if self._open is not None and self._open.kind == kind:
            return self._open
        self._close()
        return self._open_block(kind)

    def _open_block(self, kind: str, call_id: str = "", name: str = "") -> _Block:
        block = _Block(kind, len(self.blocks), call_id, name)
        self.blocks.append(block)
        self._open = block
        self._emit("content_block_start", index=block.index, content_block=block.start_dict())
        return block

    def _close(self) -> None:
        block, self._open = self._open, None
        if block is not None:
            self._emit("content_block_stop", index=block.index)
