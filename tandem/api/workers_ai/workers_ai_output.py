"""A Workers AI response's text, through the output parsers: `response` is the answer's content
(markup of calls and think blocks removed) and the calls come as Workers AI writes them,
`"tool_calls": [{"name": ..., "arguments": {...}}]` (arguments an object), beside a
`reasoning_content` when a reasoning parser split one off. Streamed: content deltas as
`{"response": ...}` events, the calls (and reasoning) with the final event. Whole:
`WorkersAIResult`, the `result` of the synchronous route and of a queued request alike.
"""

from __future__ import annotations

import json

from tandem.api.openai.openai_format import usage_dict
from tandem.parsers import ContentDelta, ReasoningDelta
from tandem.turn.chat_output import ChatOutputSpec
from tandem.types import RequestDelta


class WorkersAIOutput:
    def __init__(self, spec: ChatOutputSpec | None, request_id: str) -> None:
        self._out = spec.stream(request_id) if spec is not None else None
        self._reasoning: list[str] = []

    def content(self, text: str, final: bool = False) -> str:
        """The content among the text of one delta (the last one: `final`)."""
        if self._out is None:
            return text
        events = self._out.feed(text) + (self._out.finish() if final else [])
        self._reasoning += [e.text for e in events if isinstance(e, ReasoningDelta)]
        return "".join(e.text for e in events if isinstance(e, ContentDelta))

    def extra(self) -> dict:
        """The fields beside `response` once the text has ended: tool_calls, reasoning_content."""
        if self._out is None:
            return {}
        out: dict = {}
        calls = self._out.result().tool_calls
        if calls:
            out["tool_calls"] = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in calls]
        if self._reasoning:
            out["reasoning_content"] = "".join(self._reasoning)
        return out


class UsageTally:
    """Usage of one engine request; counts tokens itself for backends that do not."""

    def __init__(self, num_prompt: int) -> None:
        self.num_prompt = num_prompt
        self.counted = 0

    def add(self, d: RequestDelta) -> dict | None:
        """-> the usage once `d` is the final delta, else None."""
        self.counted += len(d.new_token_ids)
        if not d.finished:
            return None
        return usage_dict(d.num_prompt_tokens or self.num_prompt,
                          d.num_output_tokens or self.counted, d.num_cached_tokens)


class WorkersAIResult:
    """A run's deltas -> its whole `result`: {"response", "usage"} (+ "tool_calls",
    "reasoning_content")."""

    def __init__(self, spec: ChatOutputSpec | None, request_id: str, num_prompt: int) -> None:
        self._out = WorkersAIOutput(spec, request_id)
        self._tally = UsageTally(num_prompt)
        self._texts: list[str] = []
        self._usage: dict | None = None

    def add(self, d: RequestDelta) -> None:
        self._texts.append(self._out.content(d.new_text, d.finished))
        self._usage = self._tally.add(d) or self._usage

    def result(self) -> dict:
        return {"response": "".join(self._texts), **self._out.extra(), "usage": self._usage}
