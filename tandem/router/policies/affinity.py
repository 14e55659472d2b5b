"""affinity: keep a session (x-session-affinity) on one worker, with bounded load.

Rendezvous (highest-random-weight) hashing: every worker gets the score
`blake2b(session_id, worker_id)`; the session belongs to the highest-scoring worker. Adding or
removing a worker only moves the sessions whose top worker it is, and every gateway computes the
same mapping without sharing state (the hash is stable across processes).

Bounded load: the preferred worker is skipped when taking the request would push it above

    bound = max(slack_tokens, load_factor * (sum of loads + prompt tokens) / number of workers)

(loads as in token_aware). The session then goes to the next worker in its own rendezvous order
that is within the bound, so a session's fallback is stable too. Workers that are unhealthy,
draining or saturated are skipped the same way. If every worker is over the bound, the least
loaded one takes it. Requests without a session id go to the fallback policy unchanged.

Reasons: "affinity" (the session's own worker), "unavailable_fallback" (its worker is unhealthy,
draining or saturated), "overloaded_fallback" (its worker is over the bound), "all_overloaded".

Settings (AffinityConfig):
- load_factor: how far above the mean load a worker may go before sessions spill (>= 1).
- slack_tokens: a worker below this load is never "overloaded" (keeps sessions put when idle).
- decode_weight: as in token_aware.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from tandem.router.policies.base import Policy, candidates, token_load
from tandem.router.policies.token_aware import TokenAware
from tandem.router.snapshot import Decision, Snapshot, WorkerLoad


@dataclass(frozen=True)
class AffinityConfig:
    load_factor: float = 1.5
    slack_tokens: int = 4096
    decode_weight: float = 1.0


def rendezvous_score(session_id: str, worker_id: str) -> int:
    data = session_id.encode() + b"\x00" + worker_id.encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def rendezvous_order(session_id: str, workers: tuple[WorkerLoad, ...]) -> list[WorkerLoad]:
    """Workers best first for this session (ties, practically impossible, by id)."""
    return sorted(workers, key=lambda w: (-rendezvous_score(session_id, w.worker_id), w.worker_id))


def session_choice(snap: Snapshot, cfg: AffinityConfig) -> tuple[WorkerLoad, str]:
    """The worker for this session and the reason; snapshot must have a session id."""
    session = snap.request.session_id
    assert session is not None
    ws = candidates(snap)
    new = snap.request.num_prompt_tokens
    loads = {w.worker_id: token_load(w, cfg.decode_weight) for w in ws}
    bound = max(cfg.slack_tokens, cfg.load_factor * (sum(loads.values()) + new) / len(ws))
    order = rendezvous_order(session, snap.workers)  # all workers: the session's home may be down
    home = order[0]
    for w in order:
        if not w.available:
            continue
        if loads[w.worker_id] + new <= bound:
            if w is home:
                return w, "affinity"
            return w, "unavailable_fallback" if not home.available else "overloaded_fallback"
    return min(ws, key=lambda w: (loads[w.worker_id], w.worker_id)), "all_overloaded"


@dataclass(frozen=True)
class Affinity:
    config: AffinityConfig = field(default_factory=AffinityConfig)
    fallback: Policy = field(default_factory=TokenAware)
    name: str = "affinity"

    def choose(self, snap: Snapshot) -> Decision:
        if snap.request.session_id is None:
            return self.fallback.choose(snap)
        w, reason = session_choice(snap, self.config)
        return Decision(w.worker_id, self.name, reason)
