"""In which order prompts get prefill tokens: shortest remaining first, with aging (pure policy).

A worker that queues prompts in arrival order makes a 60-token prompt wait for every long prompt
ahead of it; that wait is most of a short request's time to first token on a busy prefill
worker. The scheduler instead serves the prompt with the lowest key first, both when admitting
waiting prompts and when handing running prefills their chunks (decodes always come before any
prefill):

    key(r) = remaining(r) + priority_tokens * priority(r) + aging_tokens_per_s * virtual_arrival(r)

- remaining(r): prompt tokens r still has to compute (past its prefix-cache hit; a request whose
  KV comes from another worker counts 1: it only waits for a pull);
- priority(r): RequestContext.priority (vLLM's convention: lower is served first);
- virtual_arrival(r) = min(arrival(r), deadline(r) - deadline_window_s): a request with a
  RequestContext.deadline is treated as if it had arrived `deadline_window_s` before it, so a
  near deadline moves it forward as if it had waited that long.

Aging is what bounds the wait. The key is `remaining - aging * age` shifted by the same
`aging * now` for every request (so the order needs no clock): a prompt that has waited
`remaining / aging_tokens_per_s` seconds goes before any prompt of priority 0 without a
deadline that arrives after that, however short. Only the finitely many requests that arrived
earlier, or that carry a lower priority or a deadline (each bounded by its offset), can still go
first, so nothing waits forever. With equal remaining work the order is arrival order.

Settings (PrefillOrder): aging_tokens_per_s (higher is closer to first-come-first-served),
priority_tokens, deadline_window_s. The scheduler uses this order only when
SchedulerConfig.long_prefill_token_threshold is set (the setting that exists so that short
prompts are not queued behind long ones); without it prompts go in arrival order. Under the
priority policy (SchedulerConfig.scheduling_policy, tandem/engine/priority.py) this order holds
within one priority level, and levels go first.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.engine.request import Request


@dataclass(frozen=True)
class PrefillOrder:
    aging_tokens_per_s: float = 1000.0  # a waiting prompt gains this many tokens of precedence per second
    priority_tokens: float = 1000.0     # one priority level is worth this many tokens
    deadline_window_s: float = 5.0      # a deadline counts as an arrival this long before it

    def key(self, req: Request, remaining: int) -> float:
        arrival = req.arrival_time
        deadline = req.context.deadline
        if deadline is not None:
            arrival = min(arrival, deadline - self.deadline_window_s)
        return remaining + self.priority_tokens * req.context.priority + self.aging_tokens_per_s * arrival
