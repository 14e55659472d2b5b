"""What a routing policy sees: frozen values, built by the gateway (or the simulator) per decision.

A policy is a pure function `(Snapshot) -> Decision`. Everything it may depend on is in here,
including the per-worker prefix match (computed by the gateway from its `PrefixIndex`) and a
request sequence number (so round robin needs no hidden counter).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("both", "prefill", "decode")


@dataclass(frozen=True)
class WorkerLoad:
    """One worker as seen at decision time.

    Token counts are the gateway's estimates (tracked per request, corrected by the worker's
    reported stats), never negative.
    """

    worker_id: str                # stable id; the gateway uses the worker's base URL
    url: str
    role: str                     # both | prefill | decode
    healthy: bool = True
    draining: bool = False        # finishing its requests, takes no new ones
    saturated: bool = False       # over an admission limit (see tandem.router.admission)
    # the token loads this request meets there: of the requests of its priority or a better one
    prefill_tokens: int = 0       # uncached prompt tokens sent to it and not yet processed
    decode_tokens: int = 0        # tokens in the contexts of its active (decoding) requests
    running: int = 0              # requests it reports running
    waiting: int = 0              # requests it reports waiting
    in_flight: int = 0            # requests the gateway has open on it
    # of those, requests of a worse priority than this request's: the worker (priority policy)
    # gives their slots to this one, so they count toward in_flight but not toward the token loads
    preemptible: int = 0
    tenant_open: int = 0          # of those, requests of this request's tenant
    kv_usage: float = 0.0         # reported fraction of KV blocks held by live requests, in [0, 1]
    cached_blocks: int = 0        # leading blocks of *this request's* prompt it holds (prefix index)
    host_blocks: int = 0          # ... in its host-memory tier (reported by the simulator only)
    disk_blocks: int = 0          # ... in its disk tier (likewise)
    sessions: int = 0             # live sessions bound to it in this pool (tandem/router/sessions.py)
    # per tier of KV_TIERS (host, disk, store), loading a block there against computing it, as
    # the worker measures it (EngineStats.kv_tier_weights); None: not reported (the policy's own)
    tier_weights: tuple[float, ...] | None = None

    @property
    def available(self) -> bool:
        """May take a new request now."""
        return self.healthy and not self.draining and not self.saturated


@dataclass(frozen=True)
class RequestInfo:
    """The request being routed."""

    num_prompt_tokens: int
    block_hashes: tuple[int, ...] = ()  # chained hashes of the prompt's full blocks
    block_size: int = 16
    # leading blocks of the prompt in the shared KV store (tandem/kvstore): any worker can load
    # them instead of computing them (the prefix index's pseudo-worker "store")
    shared_blocks: int = 0
    # the session key: x-session-affinity, else the conversation's fingerprint (tandem/gateway/
    # conversation.py); None for a request of no recognised conversation
    session_id: str | None = None
    session_home: str | None = None     # the worker this session's last request in this pool went to
    # the client says no turn follows (agent hint expect_next_turn_s = 0): the session leaves the
    # router's table once this request is placed (it no longer counts as a worker's live session)
    session_ends: bool = False
    seq: int = 0                        # gateway's request counter (round robin)


@dataclass(frozen=True)
class Snapshot:
    """One pool (all candidates of one role) plus the request. Workers keep registration order."""

    workers: tuple[WorkerLoad, ...]
    request: RequestInfo

    def available(self) -> tuple[WorkerLoad, ...]:
        return tuple(w for w in self.workers if w.available)

    def by_id(self, worker_id: str) -> WorkerLoad:
        for w in self.workers:
            if w.worker_id == worker_id:
                return w
        raise KeyError(worker_id)


@dataclass(frozen=True)
class Decision:
    """Where to send the request, and why (the reason is a metric label: keep its values few)."""

    worker_id: str
    policy: str
    reason: str
    scores: dict[str, float] = field(default_factory=dict, compare=False)  # for debugging/logs
