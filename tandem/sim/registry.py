"""The simulated workers by role: what the real Router reads (its `WorkerPools` protocol)."""

from __future__ import annotations

from collections.abc import Sequence

from tandem.sim.worker import SimWorker


class SimRegistry:
    def __init__(self, workers: Sequence[SimWorker]) -> None:
        self.workers = list(workers)   # registration order

    def pool(self, role: str) -> list[SimWorker]:
        return [w for w in self.workers if w.role == role]

    def has_live(self, role: str) -> bool:
        return any(w.role == role and w.healthy and not w.draining for w in self.workers)

    def by_url(self, url: str) -> SimWorker:
        return next(w for w in self.workers if w.url == url)

    def all(self) -> list[SimWorker]:
        return list(self.workers)
