"""One object per request that the server wires: reasoning split first, tool calls parsed from the
content that remains.

    parser = OutputParser(make_reasoning_parser("qwen3"), make_tool_parser("hermes"))
    stream = parser.stream(tools=request_tools)          # per request
    for delta_text in detokenized_deltas:
        for ev in stream.feed(delta_text): send(ev)      # ReasoningDelta / ContentDelta /
    for ev in stream.finish(): send(ev)                  # ToolCallStart / ToolCallArguments

`parse(text)` is `collect(feed(text) + finish())`, so a non-streamed response equals the streamed one
reassembled, whatever the deltas were. Either parser may be None (that stage passes text through).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from tandem.parsers.events import ContentDelta, Event, IdFactory, ParsedOutput, collect
from tandem.parsers.reasoning import ReasoningParser, ReasoningStream
from tandem.parsers.text import SegmentWriter
from tandem.parsers.tool_stream import ToolParser, Tools, ToolStream


@dataclass(frozen=True)
class OutputParser:
    reasoning: ReasoningParser | None = None
    tool: ToolParser | None = None

    @property
    def requires_special_tokens(self) -> bool:
        """The formats' markers are special tokens in their models' tokenizers."""
        return any(p.requires_special_tokens for p in self._parsers())

    def keeps_special_tokens(self, special_tokens: Collection[str]) -> bool:
        """Whether to decode with skip_special_tokens=False for a tokenizer whose special tokens are
        `special_tokens`: the formats say so, or one of their markers is special there (some
        models mark `<tool_call>` or `<think>` special)."""
        return self.requires_special_tokens or any(
            m in special_tokens for p in self._parsers() for m in p.markers)

    def _parsers(self) -> list:
        return [p for p in (self.reasoning, self.tool) if p is not None]

    def stream(self, tools: Tools = None, new_id: IdFactory | None = None,
               starts_in_reasoning: bool | None = None) -> OutputStream:
        r = self.reasoning.stream(starts_in_reasoning) if self.reasoning else None
        t = self.tool.stream(tools, new_id) if self.tool else None
        return OutputStream(r, t)

    def parse(self, text: str, tools: Tools = None, new_id: IdFactory | None = None,
              starts_in_reasoning: bool | None = None) -> ParsedOutput:
        s = self.stream(tools, new_id, starts_in_reasoning)
        return collect(s.feed(text) + s.finish())


class OutputStream:
    def __init__(self, reasoning: ReasoningStream | None, tool: ToolStream | None) -> None:
        self._reasoning = reasoning
        self._tool = tool
        self._plain: list[Event] = []
        self._plain_writer = SegmentWriter(self._plain, ContentDelta)   # no parser at all

    @property
    def num_tool_calls(self) -> int:
        return self._tool.num_calls if self._tool else 0

    def feed(self, delta: str) -> list[Event]:
        events = self._reasoning.feed(delta) if self._reasoning else [ContentDelta(delta)]
        return self._to_tools(events, final=False)

    def finish(self) -> list[Event]:
        events = self._reasoning.finish() if self._reasoning else []
        return self._to_tools(events, final=True)

    def _to_tools(self, events: list[Event], final: bool) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if not isinstance(ev, ContentDelta):
                out.append(ev)
            elif self._tool is not None:
                out += self._tool.feed(ev.text)
            else:
                self._plain_writer.write(ev.text)
                out += self._plain
                self._plain.clear()
        if final:
            if self._tool is not None:
                out += self._tool.finish()
            else:
                self._plain_writer.end_segment()
        return out
