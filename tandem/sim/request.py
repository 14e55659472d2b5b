"""One simulated request as the gateway sees it, and its timeline."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class SimRequest:
    request_id: str
    arrival: float                 # seconds since the start of the replay
    prompt_tokens: int
    output_tokens: int             # >= 1
    block_hashes: tuple[int, ...]  # hashes of the prompt's blocks (the trace's hash ids), last may be partial
    session_id: str | None = None
    # hashes of the full blocks past the prompt's, over the prompt and its output but the last
    # token: what the worker that decodes it caches at finish (a later turn resends them). A
    # Mooncake trace has none: only computed prompts are cached then.
    output_hashes: tuple[int, ...] = ()
    # closed loop (an agent's next turn waits for this answer): the request id this one follows;
    # it arrives `think_s` after that one finished, and its `arrival` is set then
    follows: str | None = None
    think_s: float = 0.0
    # filled by the simulation
    first_token: float | None = None
    last_token: float | None = None
    finished: float | None = None
    tokens: int = 0
    cached_tokens: int = 0         # prompt tokens served from a cache where the prompt was computed
    cached_by_tier: dict[str, int] = field(default_factory=dict)
    rejected: str | None = None    # why the gateway gave up on it (explicit error), if it did
    route: str = ""                # "colocated", "remote" or "local" (conditional disaggregation)

    def full_blocks(self, block_size: int) -> tuple[int, ...]:
        """Hashes of the prompt's full blocks: only those are cached and matched."""
        return self.block_hashes[:self.prompt_tokens // block_size]
