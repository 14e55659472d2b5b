"""Parser events of one turn -> the Response object and its stream of SSE events.

Output items open in the order the events come: reasoning (`reasoning` item), text (`message`
with one `output_text` part), each tool call (`function_call` with call_id, name, arguments);
an event of another kind closes the open item. Streamed, every item goes
`response.output_item.added` -> (`response.content_part.added` -> text or reasoning deltas ->
`...done` -> `response.content_part.done`) or (`response.function_call_arguments.delta`... ->
`...done`) -> `response.output_item.done`, between `response.created` + `response.in_progress`
and `response.completed` (or `response.incomplete` when max_output_tokens cut the output).
Every event carries `type` and a `sequence_number` counting from 0, framed as OpenAI frames them
(`event: TYPE` then `data: JSON`). The collected response is built by the same code, so the
streamed and non-streamed answers hold the same items.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import orjson

from tandem.errors import TandemError
from tandem.parsers import ContentDelta, Event, ReasoningDelta, ToolCallArguments, ToolCallStart
from tandem.turn.turn_output import TurnOutput
from tandem.types import FinishReason


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def sse(kind: str, payload: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


@dataclass
class _Item:
    kind: str                     # "message" | "reasoning" | "function_call"
    id: str
    call_id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    status: str = "in_progress"
    index: int = 0                # output_index

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def to_dict(self) -> dict:
        if self.kind == "message":
            content = [] if self.status == "in_progress" else [_text_part(self.text)]
            return {"id": self.id, "type": "message", "role": "assistant", "status": self.status,
                    "content": content}
        if self.kind == "reasoning":
            content = [] if self.status == "in_progress" else [_reasoning_part(self.text)]
            return {"id": self.id, "type": "reasoning", "summary": [], "content": content,
                    "status": self.status}
        return {"id": self.id, "type": "function_call", "call_id": self.call_id, "name": self.name,
                "arguments": self.text, "status": self.status}


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _reasoning_part(text: str) -> dict:
    return {"type": "reasoning_text", "text": text}


def usage_dict(out: TurnOutput) -> dict:
    return {"input_tokens": out.prompt_tokens,
            "input_tokens_details": {"cached_tokens": out.cached_tokens},
            "output_tokens": out.output_tokens,
            "output_tokens_details": {"reasoning_tokens": out.reasoning_tokens},
            "total_tokens": out.prompt_tokens + out.output_tokens}


class ResponseBuilder:
    """One response across its events. With `stream`, each call returns the SSE bytes to send."""

    def __init__(self, response_id: str, model: str, echo: dict, sampling_echo: dict,
                 stream: bool) -> None:
        self.id = response_id
        self.model = model
        self.echo = echo
        self.sampling_echo = sampling_echo    # temperature and top_p as used
        self.stream = stream
        self.created_at = int(time.time())
        self.items: list[_Item] = []
        self._open: _Item | None = None
        self._calls: dict[int, _Item] = {}    # parser call index -> its item
        self._seq = 0
        self._out: list[bytes] = []
        self.final: dict | None = None        # the Response object, once finished

    # -- the Response object ---------------------------------------------------------------
    def response(self, status: str, out: TurnOutput | None = None, error: dict | None = None) -> dict:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.id, "object": "response", "created_at": self.created_at,
                "status": status, "error": error, "incomplete_details": incomplete,
                "model": self.model, "output": [i.to_dict() for i in self.items if
                                                i.status != "in_progress"] if out else [],
                "usage": usage_dict(out) if out else None,
                **self.echo, **self.sampling_echo}

    # -- events ----------------------------------------------------------------------------
    def _emit(self, kind: str, **payload) -> None:
        if self.stream:
            self._out.append(sse(kind, {"type": kind, "sequence_number": self._seq, **payload}))
            self._seq += 1

    def _take(self) -> bytes:
        data, self._out = b"".join(self._out), []
        return data

    def start(self) -> bytes:
        first = self.response("in_progress")
        self._emit("response.created", response=first)
        self._emit("response.in_progress", response=first)
        return self._take()

    def add(self, events: list[Event]) -> bytes:
        for ev in events:
            if isinstance(ev, ContentDelta):
                item = self._ensure("message")
                item.parts.append(ev.text)
                self._emit("response.output_text.delta", item_id=item.id,
                           output_index=item.index, content_index=0, delta=ev.text, logprobs=[])
            elif isinstance(ev, ReasoningDelta):
                item = self._ensure("reasoning")
                item.parts.append(ev.text)
                self._emit("response.reasoning_text.delta", item_id=item.id,
                           output_index=item.index, content_index=0, delta=ev.text)
            elif isinstance(ev, ToolCallStart):
                self._close()
                item = _Item("function_call", new_id("fc"), call_id=ev.id, name=ev.name)
                self._calls[ev.index] = item
                self._open_item(item)
            elif isinstance(ev, ToolCallArguments):
                item = self._calls[ev.index]
                item.parts.append(ev.fragment)
                self._emit("response.function_call_arguments.delta", item_id=item.id,
                           output_index=item.index, delta=ev.fragment)
        return self._take()

    def finish(self, out: TurnOutput) -> bytes:
        """Close the open item and end the stream; the final object is `self.final`."""
        cut = out.finish_reason is FinishReason.LENGTH
        self._close("incomplete" if cut else "completed")
        status = "incomplete" if cut else "completed"
        self.final = self.response(status, out)
        self._emit(f"response.{status}", response=self.final)
        return self._take()

    def fail(self, err: TandemError) -> bytes:
        """An error after the stream began: an `error` event, then `response.failed`."""
        self._emit("error", code=err.code or err.error_type, message=err.message, param=err.param)
        failed = self.response("failed", error={"code": err.code or "server_error",
                                                "message": err.message})
        self._emit("response.failed", response=failed)
        return self._take()

    # -- items -----------------------------------------------------------------------------
    def _ensure(self, kind: str) -> _Item:
        if self._open is not None and self._open.kind == kind:
            return self._open
        self._close()
        item = _Item(kind, new_id("msg" if kind == "message" else "rs"))
        self._open_item(item)
        part = _text_part("") if kind == "message" else _reasoning_part("")
        self._emit("response.content_part.added", item_id=item.id, output_index=item.index,
                   content_index=0, part=part)
        return item

    def _open_item(self, item: _Item) -> None:
        item.index = len(self.items)
        self.items.append(item)
        self._open = item
        self._emit("response.output_item.added", output_index=item.index, item=item.to_dict())

    def _close(self, status: str = "completed") -> None:
        item, self._open = self._open, None
        if item is None:
            return
        idx = item.index
        if item.kind == "message":
            self._emit("response.output_text.done", item_id=item.id, output_index=idx,
                       content_index=0, text=item.text, logprobs=[])
            self._emit("response.content_part.done", item_id=item.id, output_index=idx,
                       content_index=0, part=_text_part(item.text))
        elif item.kind == "reasoning":
            self._emit("response.reasoning_text.done", item_id=item.id, output_index=idx,
                       content_index=0, text=item.text)
            self._emit("response.content_part.done", item_id=item.id, output_index=idx,
                       content_index=0, part=_reasoning_part(item.text))
        else:
            self._emit("response.function_call_arguments.done", item_id=item.id,
                       output_index=idx, name=item.name, arguments=item.text)
        item.status = status
        self._emit("response.output_item.done", output_index=idx, item=item.to_dict())
