"""A chat response's text -> reasoning, content and tool calls, one parser stream per choice.

`ChatOutputSpec` is decided once per request when it is parsed (which parsers, the offered tools,
whether the prompt opened a think block, parallel_tool_calls); `stream(request_id, choice)` makes
the choice's `ChoiceOutput`. The formatter feeds it the choice's text deltas in order, streamed or
not, so a streamed response reassembles to exactly the non-streamed one (tandem.parsers
guarantees it for any split of the text), call ids included: they are made from the request id,
the choice and the call's index, never drawn at random.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tandem.parsers import (
    Event,
    IdFactory,
    OutputParser,
    ParsedOutput,
    ToolCallArguments,
    ToolCallStart,
    collect,
    random_mistral_id,
)


def call_id_factory(request_id: str, choice: int, short: bool = False) -> IdFactory:
    """Call index -> id: `call_` + 24 hex digits (vLLM's length), or 9 alphanumerics for formats
    whose templates accept no other (mistral)."""
    def make(index: int) -> str:
        digest = hashlib.sha256(f"{request_id}/{choice}/{index}".encode()).hexdigest()
        return digest[:9] if short else "call_" + digest[:24]
    return make


@dataclass(frozen=True)
class ChatOutputSpec:
    parser: OutputParser
    tools: list[dict] | None = None        # the offered tools when the tool stage runs
    starts_in_reasoning: bool | None = None  # the prompt opened a think block (None: the parser's default)
    parallel_tool_calls: bool = True        # False: calls after the first are dropped

    @property
    def parses_tools(self) -> bool:
        return self.parser.tool is not None

    @property
    def parses_reasoning(self) -> bool:
        return self.parser.reasoning is not None

    def stream(self, request_id: str, choice: int = 0) -> "ChoiceOutput":
        short = self.parser.tool is not None and self.parser.tool.default_id is random_mistral_id
        return ChoiceOutput(self, call_id_factory(request_id, choice, short))

    def parse(self, text: str, request_id: str, choice: int = 0) -> ParsedOutput:
        out = self.stream(request_id, choice)
        out.feed(text)
        out.finish()
        return out.result()


class ChoiceOutput:
    """One choice's parser: text deltas in, events out; `result()` is every event so far collected."""

    def __init__(self, spec: ChatOutputSpec, new_id: IdFactory) -> None:
        self._stream = spec.parser.stream(spec.tools, new_id, spec.starts_in_reasoning)
        self._parallel = spec.parallel_tool_calls
        self._events: list[Event] = []

    def feed(self, text: str) -> list[Event]:
        return self._keep(self._stream.feed(text)) if text else []

    def finish(self) -> list[Event]:
        return self._keep(self._stream.finish())

    @property
    def num_tool_calls(self) -> int:
        n = self._stream.num_tool_calls
        return min(n, 1) if not self._parallel else n

    def result(self) -> ParsedOutput:
        return collect(self._events)

    def _keep(self, events: list[Event]) -> list[Event]:
        if not self._parallel:   # parallel_tool_calls false: the first call only
            events = [e for e in events if not (isinstance(e, (ToolCallStart, ToolCallArguments))
                                                and e.index > 0)]
        self._events += events
        return events
