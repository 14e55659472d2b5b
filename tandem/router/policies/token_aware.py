"""token_aware: lowest estimated token load wins.

load(w) = prefill_tokens(w) + decode_weight * decode_tokens(w)

- prefill_tokens: uncached prompt tokens the gateway sent to w that w has not processed yet
  (they leave the estimate when the first token comes back);
- decode_tokens: tokens in the contexts of w's active requests (prompt + output so far);
  attention reads all of them every decode step, so they measure the memory-bound decode work.
Both are tracked per request by the gateway (`tandem.router.load_tracker`) and corrected by the
load the worker reports in /internal/stats.

Settings (TokenAwareConfig):
- decode_weight: cost of one context token relative to one pending prefill token. 1.0 treats them
  alike; lower it to let prefill backlog dominate (TTFT), raise it to protect inter-token latency.
Ties (e.g. an idle pool) rotate with the request counter, then fall back to registration order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.router.policies.base import candidates, rotation, token_load
from tandem.router.snapshot import Decision, Snapshot


@dataclass(frozen=True)
class TokenAwareConfig:
    decode_weight: float = 1.0


@dataclass(frozen=True)
class TokenAware:
    config: TokenAwareConfig = field(default_factory=TokenAwareConfig)
    name: str = "token_aware"

    def choose(self, snap: Snapshot) -> Decision:
        ws = candidates(snap)
        rank = rotation(ws, snap.request.seq)
        loads = {w.worker_id: token_load(w, self.config.decode_weight) for w in ws}
        best = min(ws, key=lambda w: (loads[w.worker_id], w.in_flight, rank[w.worker_id]))
        ties = sum(loads[w.worker_id] == loads[best.worker_id] for w in ws)
        return Decision(best.worker_id, self.name, "tie" if ties > 1 else "least_tokens", loads)
