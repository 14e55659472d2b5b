"""Reasoning parsers (`--reasoning-parser NAME`, vLLM's names): split `<think>...</think>` off the
visible answer.

    <think>
    The user wants the weather; call the tool.
    </think>

    Let me check.          -> reasoning "The user wants the weather; call the tool.", content "Let me check."

Rules, the same streamed or not:
- A `<think>` opening the output (after spaces) is consumed and reasoning begins. Otherwise the output
  starts in reasoning when the template already opened the block in the prompt (deepseek_r1, kimi_k2 by
  default; `prompt_starts_in_reasoning(prompt)` reads it from the rendered prompt), else in content
  (qwen3 by default: an output with no `<think>` is all content).
- Reasoning ends at `</think>` (consumed; spaces after it are dropped) or, for kimi_k2, where a
  tool-call section begins (`<|tool_calls_section_begin|>` stays in the content for the tool parser).
  With no end, everything after the start is reasoning (the output was cut short).
- The reasoning text is stripped of surrounding whitespace; None when empty. Content after it is
  verbatim; None when only whitespace. A later `<think>` in the content is content.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.parsers.events import ContentDelta, Event, ReasoningDelta, collect
from tandem.parsers.json_stream import WS
from tandem.parsers.text import MarkerScanner, SegmentWriter
from tandem.parsers.tool_registry import UnknownParser


@dataclass(frozen=True)
class ReasoningParser:
    name: str
    starts_in_reasoning: bool       # where an output with no leading <think> starts, by default
    start: str = "<think>"
    end: str = "</think>"
    implicit_ends: tuple[str, ...] = ()   # also end reasoning; kept at the start of the content
    # True when the markers are special tokens that skip_special_tokens=True would strip
    requires_special_tokens: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.start, self.end) + self.implicit_ends

    def prompt_starts_in_reasoning(self, prompt: str) -> bool:
        """Whether generation starts inside a think block, from the rendered prompt's end: an open
        `<think>` (thinking template) -> True; a closed `</think>` (thinking disabled) -> False."""
        tail = prompt.rstrip()
        if tail.endswith(self.start):
            return True
        if tail.endswith(self.end):
            return False
        return self.starts_in_reasoning

    def stream(self, starts_in_reasoning: bool | None = None) -> ReasoningStream:
        inside = self.starts_in_reasoning if starts_in_reasoning is None else starts_in_reasoning
        return ReasoningStream(self, inside)

    def parse(self, text: str, starts_in_reasoning: bool | None = None) -> tuple[str | None, str | None]:
        s = self.stream(starts_in_reasoning)
        out = collect(s.feed(text) + s.finish())
        return out.reasoning, out.content


class ReasoningStream:
    """Per-request: text deltas in, ReasoningDelta / ContentDelta events out."""

    def __init__(self, spec: ReasoningParser, starts_in_reasoning: bool) -> None:
        self._spec = spec
        self._inside = starts_in_reasoning
        self._buf = ""
        self._final = False
        self._out: list[Event] = []
        self._reasoning = SegmentWriter(self._out, ReasoningDelta, strip=True)
        self._content = SegmentWriter(self._out, ContentDelta)
        self._ends = MarkerScanner((spec.end,) + spec.implicit_ends)
        self._state = self._opening
        self._lstrip = False

    def feed(self, delta: str) -> list[Event]:
        self._buf += delta
        while self._state():
            pass
        return self._take()

    def finish(self) -> list[Event]:
        self._final = True
        while self._state():
            pass
        self._reasoning.end_segment()
        self._content.end_segment()
        return self._take()

    def _take(self) -> list[Event]:
        out = list(self._out)
        self._out.clear()
        return out

    def _opening(self) -> bool:
        start, buf = self._spec.start, self._buf
        j = len(buf) - len(buf.lstrip(WS))
        head = buf[j:j + len(start)]
        if head == start:
            self._buf = buf[j + len(start):]
            self._state = self._in_reasoning
            return True
        if start.startswith(head) and not self._final:   # only spaces or part of <think> so far
            return False
        self._state = self._in_reasoning if self._inside else self._in_content
        return True

    def _in_reasoning(self) -> bool:
        buf = self._buf
        hit = self._ends.search(buf, 0)
        if hit is None:
            keep = 0 if self._final else self._ends.held(buf, 0)
            self._reasoning.write(buf[:len(buf) - keep])
            self._buf = buf[len(buf) - keep:]
            return False
        at, marker = hit
        self._reasoning.write(buf[:at])
        self._reasoning.end_segment()
        if marker == self._spec.end:
            self._buf = buf[at + len(marker):]
            self._lstrip = True
        else:
            self._buf = buf[at:]
        self._state = self._in_content
        return True

    def _in_content(self) -> bool:
        text, self._buf = self._buf, ""
        if self._lstrip:
            stripped = text.lstrip()
            if not stripped:
                return False
            text, self._lstrip = stripped, False
        self._content.write(text)
        return False


_REASONING_PARSERS: tuple[ReasoningParser, ...] = (
    ReasoningParser("deepseek_r1", starts_in_reasoning=True),
    ReasoningParser("qwen3", starts_in_reasoning=False),
    ReasoningParser("kimi_k2", starts_in_reasoning=True, implicit_ends=("<|tool_calls_section_begin|>",),
                    requires_special_tokens=True),
)
REASONING_PARSER_NAMES: tuple[str, ...] = tuple(p.name for p in _REASONING_PARSERS)


def make_reasoning_parser(name: str) -> ReasoningParser:
    for parser in _REASONING_PARSERS:
        if parser.name == name:
            return parser
    raise UnknownParser(f"unknown reasoning parser {name!r}; known parsers: {', '.join(REASONING_PARSER_NAMES)}",
                        param="reasoning_parser")
