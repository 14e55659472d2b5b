"""The agent hint of a request: when the client expects its next turn (KV retention across tool
calls, tandem/kv/retention.py).

In the body of chat completions, completions, Responses and Messages:
`"agent": {"expect_next_turn_s": 3}`; or as the header `x-agent-expect-next-turn-s: 3` (the body
wins when both are sent). A number of seconds >= 0: 0 says no next turn is coming (the session
ended; its KV goes first under pressure). Not a number, negative or not finite: 400 naming the
field. Above MAX_EXPECT_NEXT_TURN_S: clamped to it (a worker holds KV at most its own
`--kv-retention-max-s`, 600 s by default).
"""

from __future__ import annotations

import math

from tandem.errors import InvalidRequest
from tandem.turn.fields import Fields, bad

HEADER = "x-agent-expect-next-turn-s"
MAX_EXPECT_NEXT_TURN_S = 3600.0
_KEYS = {"expect_next_turn_s"}


def clamp_hint(seconds: float) -> float:
    return min(seconds, MAX_EXPECT_NEXT_TURN_S)


def read_agent(f: Fields) -> float | None:
    """The body's `agent.expect_next_turn_s`, clamped; None when absent."""
    raw = f.raw("agent")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise bad(f.name("agent"), 'must be an object like {"expect_next_turn_s": 3}')
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise bad(f.name("agent." + unknown[0]), "is not a known agent hint (known: expect_next_turn_s)")
    sub = Fields(raw, f.name("agent."))
    if not sub.has("expect_next_turn_s"):
        return None
    return clamp_hint(sub.float("expect_next_turn_s", 0.0, lo=0.0))


def parse_header(value: str | None) -> float | None:
    """The header's value in seconds, clamped; None when absent."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidRequest(f"header '{HEADER}' must be a number of seconds >= 0, got {value!r}",
                             param=HEADER)
    return clamp_hint(seconds)
