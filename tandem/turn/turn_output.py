"""The engine deltas of one turn -> parser events (content, reasoning, tool calls), with the token
counts and how the turn ended. Shared by the Responses and Messages formatters, which only turn
these events into their own items and blocks; the streamed and collected answers of either API
are therefore made from the same events.
"""

from __future__ import annotations

from typing import Any

from tandem.parsers import ContentDelta, Event, ReasoningDelta, ToolCallStart
from tandem.turn.chat_output import ChoiceOutput
from tandem.types import FinishReason, RequestDelta


class TurnOutput:
    """Feed every delta of one engine request, in order; read the counts once it finished."""

    def __init__(self, parser: ChoiceOutput | None, prompt_len: int) -> None:
        """`parser`: the chat route's per-choice parser (None: the text is all content)."""
        self._parser = parser
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
        if self._parser is None:
            events: list[Event] = [ContentDelta(d.new_text)] if d.new_text else []
        else:
            events = self._parser.feed(d.new_text)
            if d.finished:
                events += self._parser.finish()
        if any(isinstance(e, ReasoningDelta) for e in events):
            self.reasoning_tokens += len(d.new_token_ids)
        self.num_tool_calls += sum(isinstance(e, ToolCallStart) for e in events)
        if d.finished:
            self.finish_reason = d.finish_reason or FinishReason.STOP
        return events

    def stop_sequence(self, stops: tuple[str, ...], tokenizer: Any, skip_special_tokens: bool) -> str | None:
        """Which of `stops` ended the output, or None (an end-of-turn token, the length, or none
        of them). The engine ends the output at the token that completes the first stop string
        and leaves that string out of the text, so in the full decode of the output's tokens the
        matched string reaches past the emitted text; the earliest such string is the one."""
        if self.finish_reason is not FinishReason.STOP or not stops:
            return None
        emitted = sum(len(t) for t in self.raw_text)
        full = tokenizer.decode(self.output_ids, skip_special_tokens=skip_special_tokens)
        best: tuple[int, str] | None = None
        for s in stops:
            at = full.find(s, max(0, emitted - len(s) + 1))
            if at != -1 and (best is None or at < best[0]):
                best = (at, s)
        return best[1] if best else None
