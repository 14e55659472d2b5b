"""Priority levels: vLLM's `priority` (lower is served first), with aging (pure policy).

Under SchedulerConfig.scheduling_policy "priority" the scheduler serves requests by level, lower
first, and keeps its first-come-first-served order among requests of one level (the prefill
order's key when the chunk cap is set, tandem/engine/prefill_order.py; else arrival order, a
preempted request first). A waiting request's level:

    level(r) = max(priority(r) - floor(waited(r) / aging_s), best)

- waited(r): seconds since its arrival (a preempted request keeps aging from its arrival);
- best: the lowest priority among the requests present (waiting, loading or running). Aging
  lifts a request to the best level present and no further, so while nothing better is there
  requests of one priority share one level: priority 0 everywhere is first-come-first-served,
  exactly.

KV retained for an agent's next turn (tandem/kv/session_retention.py) is kept from requests of a
worse priority than every hold's at admission (they may take it once aged past the holds' level:
`retention_level`, the same bound); running requests grow into it as into any free block.

A running request keeps the lowest level it was admitted at (`admitted_level`): a request of
priority 10 that aged to level 0 is not sent back by the next request of priority 0.

The starvation bound: a request of priority p waits behind newer requests of a better priority
q at most (p - q) * aging_s seconds; after that it is ordered among them as one of theirs (in
arrival order; with the chunk cap set, by the prefill order's key, where its own priority still
counts `priority_tokens` a level: at most (p - q) * priority_tokens / aging_tokens_per_s seconds
more, besides that order's own bound). Preemption does not undo it: a waiting request preempts
only running requests whose level is worse than its own priority (not its aged level), so a
request admitted by preempting others is never preempted by them for admission in turn, and one
admitted at the best level present gives way only to a better priority, or to block pressure as
the latest admitted of the worst level (the rule among equals; a victim that has since aged to a
better level than the other's counts as better there).
"""

from __future__ import annotations

import math

from tandem.engine.request import Request


def waiting_level(req: Request, now: float, best: int, aging_s: float) -> int:
    """The level of a waiting request at time `now` (see the module's docstring)."""
    aged = math.floor(max(0.0, now - req.arrival_time) / aging_s)
    return max(req.context.priority - aged, best)


def retention_level(req: Request, now: float, aging_s: float) -> int:
    """The level at which a request being admitted may take KV retained for sessions (the block
    pool keeps holds of a better priority from it): its priority aged without the floor of the
    best level present, so that it waits at most (p - q) * aging_s for the holds of priority q
    even while no request of theirs is there."""
    return req.context.priority - math.floor(max(0.0, now - req.arrival_time) / aging_s)


def admitted_level(req: Request) -> int:
    """The level of an admitted request: its priority, or the lower level it was admitted at."""
    level = req.context.priority
    return level if req.admitted_level is None else min(level, req.admitted_level)
