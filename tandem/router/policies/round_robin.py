"""round_robin: the request counter modulo the available workers. Baseline; ignores load and cache."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.router.policies.base import candidates
from tandem.router.snapshot import Decision, Snapshot


@dataclass(frozen=True)
class RoundRobin:
    name: str = "round_robin"

    def choose(self, snap: Snapshot) -> Decision:
        ws = candidates(snap)
        w = ws[snap.request.seq % len(ws)]
        return Decision(w.worker_id, self.name, "rotation")
