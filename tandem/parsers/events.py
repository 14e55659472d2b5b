"""The values the output parsers produce: stream events and the assembled (non-streamed) result.

A streaming parser turns detokenized text deltas into a list of events per delta:
`ContentDelta` (visible answer text), `ReasoningDelta` (text inside a think block), `ToolCallStart`
(a call's index, id and name, once they are certain) and `ToolCallArguments` (the next fragment of that
call's JSON arguments). `collect(events)` folds any event list into the `ParsedOutput` a
non-streamed response carries; the non-streamed `parse()` of every parser is defined as
`collect(feed(text) + finish())`, so the two paths agree by construction.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# A call id maker: call index within the response -> id. A caller that needs the streamed and the
# non-streamed forms of one request to agree passes a deterministic one (e.g. request id + index).
IdFactory = Callable[[int], str]

_ALNUM = string.ascii_letters + string.digits


def random_call_id(index: int = 0) -> str:
    """vLLM's style: `call_` + 24 random alphanumerics (the index is unused)."""
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


def random_mistral_id(index: int = 0) -> str:
    """Mistral templates accept only 9-character alphanumeric call ids."""
    return "".join(secrets.choice(_ALNUM) for _ in range(9))


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int  # 0, 1, 2... in the order the calls appear
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    index: int
    fragment: str  # never empty; the fragments of one call concatenate to its `arguments`


Event = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArguments


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON text: the canonical json.dumps(obj, ensure_ascii=False) of the arguments


@dataclass(frozen=True)
class ParsedTools:
    content: str | None  # None when there is no text outside the calls
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True)
class ParsedOutput:
    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


def collect(events: Iterable[Event]) -> ParsedOutput:
    """Fold a stream of events into the non-streamed result (empty text becomes None)."""
    content: list[str] = []
    reasoning: list[str] = []
    starts: list[ToolCallStart] = []
    args: dict[int, list[str]] = {}
    for ev in events:
        if isinstance(ev, ContentDelta):
            content.append(ev.text)
        elif isinstance(ev, ReasoningDelta):
            reasoning.append(ev.text)
        elif isinstance(ev, ToolCallStart):
            starts.append(ev)
            args[ev.index] = []
        else:
            args[ev.index].append(ev.fragment)
    calls = [ToolCall(s.id, s.name, "".join(args[s.index])) for s in starts]
    return ParsedOutput("".join(reasoning) or None, "".join(content) or None, calls)
