"""KV retention across an agent's tool calls: the policy (pure functions of plain values).

An agent's turn that ends in tool calls is followed, after the tool ran, by a next turn that
resends the whole conversation. Its KV is worth keeping on the device for that pause; the
blocks of a session that ended (its turn ended in `stop` without tool calls) are worth little.

- How a turn ends (`turn_end`): an explicit hint (`expect_next_turn_s` > 0) or output that opened
  a tool call (one of the request's `tool_call_markers`) -> RETAIN; a hint of 0, or a `stop`
  without a call although tools were offered (an agent's final answer) -> ENDED; anything else
  (a chat turn without tools, whose user may well answer; length, abort, error, no session) ->
  NONE: plain LRU. A prefill worker's turn (handed over to a decode worker) is retained on a hint
  only: the prompt's blocks serve the next turn's prefill.
- The expected gap (`expected_gap`): per session and per tenant, an exponentially weighted mean
  `m` and mean absolute deviation `d` of the observed gaps between a retained turn's end and the
  next turn's arrival (`observe`); the gap is the session's `m + k * d` (a high quantile of a
  roughly normal spread) once it has an observation, else its tenant's, else the default; never
  below `min_gap_s`, never above `max_s`. A hint h replaces the estimate: h x (1 + hint_slack) +
  min_gap_s (the next turn arrives after the pause plus its wait at the gateway), at most `max_s`.
- The share bound (`over_share`): at most `share` of the device blocks are retained at once; a new
  retention first releases the holds whose deadline is later than its own, latest first (their
  sessions come back last: as Belady's rule evicts what is needed furthest in the future), and
  keeps only its first blocks if it still exceeds the bound (the prefix is what every later turn
  resends).
- Eviction order (the mechanism, tandem/kv/block_pool.py): free blocks of ended or expired sessions
  first, then other free blocks least recently used first, then retained blocks (least recently
  freed first); a retained block taken so is demoted to the host tier when one is configured.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.config import RetentionConfig
from tandem.types import AgentTurn, FinishReason


class TurnEnd(enum.Enum):
    RETAIN = "retain"   # another turn is expected: keep its blocks until the deadline
    ENDED = "ended"     # the session ended: its blocks go first under pressure
    NONE = "none"       # nothing known: plain LRU


@dataclass(frozen=True)
class GapEstimate:
    """Exponentially weighted mean and mean absolute deviation of observed gaps, in seconds."""

    mean: float
    dev: float
    count: int = 1


def turn_end(reason: FinishReason | None, output_text: str, agent: AgentTurn,
             has_session: bool) -> TurnEnd:
    """What a finished turn says of the session's next one."""
    hint = agent.expect_next_turn_s
    if not has_session:
        return TurnEnd.NONE
    if reason is None:   # a prefill handed over: the turn goes on elsewhere; only a hint tells
        return TurnEnd.RETAIN if hint is not None and hint > 0 else TurnEnd.NONE
    if reason is FinishReason.STOP or reason is FinishReason.LENGTH:
        if hint is not None:
            return TurnEnd.RETAIN if hint > 0 else TurnEnd.ENDED
        if any(m and m in output_text for m in agent.tool_call_markers):
            return TurnEnd.RETAIN
        if reason is FinishReason.STOP and agent.tool_call_markers:
            return TurnEnd.ENDED
    return TurnEnd.NONE


def observe(prev: GapEstimate | None, gap_s: float, cfg: RetentionConfig) -> GapEstimate:
    """The estimate after one more observed gap (clamped to [0, max_s])."""
    gap = min(max(gap_s, 0.0), cfg.max_s)
    if prev is None:
        return GapEstimate(gap, gap / 2, 1)
    a = cfg.alpha
    mean = (1 - a) * prev.mean + a * gap
    dev = (1 - a) * prev.dev + a * abs(gap - prev.mean)
    return GapEstimate(mean, dev, prev.count + 1)


def expected_gap(session: GapEstimate | None, tenant: GapEstimate | None, cfg: RetentionConfig) -> float:
    """Seconds to retain a turn's blocks without a hint."""
    est = session or tenant
    gap = cfg.default_gap_s if est is None else est.mean + cfg.deviations * est.dev
    return min(max(gap, cfg.min_gap_s), cfg.max_s)


def retain_for(agent: AgentTurn, session: GapEstimate | None, tenant: GapEstimate | None,
               cfg: RetentionConfig) -> float:
    """Seconds a RETAIN turn's blocks are kept: the hint (clamped to max_s), else the estimate."""
    hint = agent.expect_next_turn_s
    if hint is not None and hint > 0:
        return min(hint * (1 + cfg.hint_slack) + cfg.min_gap_s, cfg.max_s)
    return expected_gap(session, tenant, cfg)


def share_limit(num_blocks: int, cfg: RetentionConfig) -> int:
    """Blocks that may be retained at once."""
    return int(num_blocks * cfg.share)


def over_share(num_retained: int, num_new: int, limit: int) -> int:
    """Blocks by which retaining `num_new` more (not retained yet) exceeds the limit (0: fits)."""
    return max(0, num_retained + num_new - limit)


def first_to_release(holds: Sequence[tuple[str, float]], deadline: float) -> list[str]:
    """Holds (id, deadline) that give way to a new one held until `deadline`, in order: those
    held longer than it, the latest deadline first."""
    return [h for h, d in sorted(holds, key=lambda x: -x[1]) if d > deadline]
