"""least_requests: fewest open requests wins. Baseline; blind to request sizes and cache.

A worker's request count is the larger of what the gateway has open on it and what it reports
(running + waiting), so requests from other clients count too. Ties rotate with the request counter.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.router.policies.base import candidates, rotation
from tandem.router.snapshot import Decision, Snapshot, WorkerLoad


def num_requests(w: WorkerLoad) -> int:
    return max(w.in_flight, w.running + w.waiting)


@dataclass(frozen=True)
class LeastRequests:
    name: str = "least_requests"

    def choose(self, snap: Snapshot) -> Decision:
        ws = candidates(snap)
        rank = rotation(ws, snap.request.seq)
        best = min(ws, key=lambda w: (num_requests(w), rank[w.worker_id]))
        reason = "tie" if sum(num_requests(w) == num_requests(best) for w in ws) > 1 else "fewest"
        return Decision(best.worker_id, self.name, reason,
                        {w.worker_id: float(num_requests(w)) for w in ws})
