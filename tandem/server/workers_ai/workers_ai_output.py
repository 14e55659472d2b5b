"""A Workers AI response's text, through the output parsers: `response` is the answer's content
(markup of calls and think blocks removed) and the calls come as Workers AI writes them,
`"tool_calls": [{"name": ..., "arguments": {...}}]` (arguments an object), beside a
`reasoning_content` when a reasoning parser split one off. Streamed: content deltas as
`{"response": ...}` events, the calls (and reasoning) with the final event.
"""

from __future__ import annotations

import json

from tandem.parsers import ContentDelta, ReasoningDelta
from tandem.server.chat_output import ChatOutputSpec


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
