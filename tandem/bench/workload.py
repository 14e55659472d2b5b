"""What a benchmark sends: sessions of turns, with arrival times and the ideal cache hits.

A trace request is a session of one turn. An agentic session is several turns: turn k's
conversation is the session's base messages, then for every earlier turn j the assistant's
actual output of turn j followed by turn j+1's `new_messages` (a tool result). The driver
builds that history; the workload only plans it, so a workload is plain data, deterministic
by its seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Turn:
    request_id: str
    max_tokens: int
    think_time_s: float = 0.0              # pause after the previous turn's answer, before this one
    prompt_token_ids: np.ndarray | None = None  # int32 [T]: trace replay sends exactly these ids
    new_messages: tuple[dict, ...] = ()    # chat messages appended after the previous answer
    expected_prompt_tokens: int = 0        # planned prompt length (exact for token ids, estimated for chat)
    ideal_cached_tokens: int = 0           # planned hits of an infinite prefix cache (same units)


@dataclass(frozen=True)
class Session:
    session_id: str
    turns: tuple[Turn, ...]
    arrival_s: float = 0.0                 # open loop: when the session's first turn is sent
    tenant: str | None = None
    base_messages: tuple[dict, ...] = ()   # system prompt + first user message (chat workloads)
    tools: tuple[dict, ...] | None = None  # OpenAI tool definitions sent with every turn
    affinity: bool = False                 # send x-session-affinity: session_id


@dataclass(frozen=True)
class Workload:
    name: str
    sessions: tuple[Session, ...]
    params: dict = field(default_factory=dict)  # how it was generated (goes into the report)
    uses_token_ids: bool = False               # True: /v1/completions with token id prompts

    @property
    def num_requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def ideal_cached_ratio(self) -> float:
        """Planned ideal hit ratio over the whole workload (see each generator for its units)."""
        ideal = sum(t.ideal_cached_tokens for s in self.sessions for t in s.turns)
        total = sum(t.expected_prompt_tokens for s in self.sessions for t in s.turns)
        return ideal / total if total else 0.0


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """n arrival times (s) of a Poisson process with `rate` per second, starting at 0."""
    if rate <= 0:
        return [0.0] * n
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()
