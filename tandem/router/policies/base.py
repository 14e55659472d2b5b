"""The policy interface and the few helpers every policy shares.

A policy is a pure function of a `Snapshot`: same snapshot, same `Decision`. It is only called
with at least one available worker (admission, in `tandem.router.admission`, answers 503/429
before that); it never returns a worker that is unhealthy or draining.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from tandem.errors import NoHealthyWorker
from tandem.router.snapshot import Decision, Snapshot, WorkerLoad


class Policy(Protocol):
    name: str

    def choose(self, snap: Snapshot) -> Decision: ...


def candidates(snap: Snapshot) -> tuple[WorkerLoad, ...]:
    """Available workers in registration order; raises if there is none (a gateway bug)."""
    ws = snap.available()
    if not ws:
        raise NoHealthyWorker("no healthy worker in this pool")
    return ws


def token_load(w: WorkerLoad, decode_weight: float) -> float:
    """A worker's load in prefill-token units: pending prefill plus weighted decode context."""
    return w.prefill_tokens + decode_weight * w.decode_tokens


def rotation(ws: Sequence[WorkerLoad], seq: int) -> dict[str, int]:
    """Tie-break rank per worker id: the request counter rotates which worker wins a tie,
    so an idle pool is still spread evenly. Rank 0 wins."""
    n = len(ws)
    return {w.worker_id: (i - seq) % n for i, w in enumerate(ws)}
