"""The engine deltas of one turn -> parser events (content, reasoning, tool calls), with the token
counts and how the turn ended. Shared by the Responses and Messages formatters, which only turn
these events into their own items and blocks; the streamed and collected answers of either API
are therefore made from the same events.
"""

from __future__ import annotations

from typing import Any

from tandem.parsers import ContentDelta, Event, OutputStream, ReasoningDelta, ToolCallStart
from tandem.types import FinishReason, RequestDelta


class TurnOutput:
    """Feed every delta of one engine request, in order; read the counts once it finished."""

    def __init__(self, stream: OutputStream | None, prompt_len: int) -> None:
        self._stream = stream
        self.prompt_tokens = prompt_len       # replaced by the engine's count when it reports one
        self.cached_tokens = 0
        self.output_tokens = 0
        self.reasoning_tokens = 0             # tokens of deltas that produced reasoning text
        self.finish_reason: FinishReason | None = None
        self.num_tool_calls = 0
        self.raw_text: list[str] = []          # the text as generated, before parsing
        self.output_ids: list[int] = []

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def feed(self, d: RequestDelta) -> list[Event]:
        if d.num_prompt_tokens:
            self.prompt_tokens = d.num_prompt_tokens
            self.cached_tokens = d.num_cached_tokens
        self.output_ids += d.new_token_ids
        self.output_tokens = max(self.output_tokens + len(d.new_token_ids), d.num_output_tokens)
        if d.new_text:
            self.raw_text.append(d.new_text)
        if self._stream is None:
            events: list[Event] = [ContentDelta(d.new_text)] if d.new_text else []
        else:
            events = self._stream.feed(d.new_text) if d.new_text else []
            if d.finished:
                events += self._stream.finish()
        if any(isinstance(e, ReasoningDelta) for e in events):
            self.reasoning_tokens += len(d.new_token_ids)
        self.num_tool_calls += sum(isinstance(e, ToolCallStart) for e in events)
        if d.finished:
            self.finish_reason = d.finish_reason or FinishReason.STOP
        return events

    def stop_sequence(self, stops: tuple[str, ...], tokenizer: Any, skip_special_tokens: bool) -> str | None:
        """Which of `stops` ended the output, or None (an end-of-turn token, the length, or none
        of them). The engine cuts the text at the first stop string, so the output's full decode
        continues the emitted text with the string that matched."""
        if self.finish_reason is not FinishReason.STOP or not stops:
            return None
        emitted = "".join(self.raw_text)
        full = tokenizer.decode(self.output_ids, skip_special_tokens=skip_special_tokens)
        if not full.startswith(emitted):
            return None
        rest = full[len(emitted):]
        return next((s for s in stops if rest.startswith(s)), None)
