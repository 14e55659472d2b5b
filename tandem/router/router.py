"""The router: from the workers' live state to one routing decision (snapshot, admission, policy,
bookkeeping).

The policy stays pure; this module does everything around it: reads the workers' state, the
load tracker and the prefix index, hashes the prompt like the workers do, and counts the decision.

Direction of imports: the gateway imports the router, never the reverse. The router reads the
workers through two small protocols (`WorkerPools`, `WorkerState`) that the gateway's registry
satisfies as it is, so tandem/router/ needs nothing from tandem/gateway/ and the fleet simulator
can drive the same router over its own worker table. Policies, snapshot, admission, prefix index,
session table and load tracker import nothing above tandem.kv / tandem.types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tandem.errors import NoHealthyWorker
from tandem.kv.block_hash import Partition, hash_request_blocks
from tandem.router.admission import AdmissionLimits, admit, fair_share_overflow
from tandem.router.load_tracker import LoadTracker
from tandem.router.policies.base import Policy
from tandem.router.prefix_index import STORE, PrefixIndex, tier_holder
from tandem.router.routed_prefixes import RoutedPrefixes
from tandem.router.sessions import SessionTable
from tandem.router.snapshot import Decision, RequestInfo, Snapshot, WorkerLoad
from tandem.types import KV_TIERS


class WorkerState(Protocol):
    """What the router reads of one worker (tandem.gateway.registry.Worker)."""

    url: str              # also its id
    role: str | None      # both | prefill | decode; None until the worker reported it
    healthy: bool
    draining: bool
    stats: dict           # its last /internal/stats: num_running, num_waiting, kv_cache_usage

    @property
    def block_size(self) -> int | None: ...   # from its KV layout; None until reported

    @property
    def hash_seed(self) -> int: ...


class WorkerPools(Protocol):
    """The workers by role (tandem.gateway.registry.Registry)."""

    def pool(self, role: str) -> Sequence[WorkerState]: ...   # registration order, healthy or not

    def has_live(self, role: str) -> bool: ...                 # a healthy, non-draining one


DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class Route:
    worker: WorkerState
    decision: Decision
    cached_blocks: int    # leading blocks of the tokens the chosen worker holds (index view)
    uncached_tokens: int  # tokens it is expected to compute
    load: WorkerLoad | None = None      # the chosen worker as the policy saw it
    request: RequestInfo | None = None  # the request as the policy saw it


@dataclass
class HashMemo:
    """Block hashes of one token sequence, per (block size, seed), computed once per request.
    `extra_keys`: the request's KV partition (tandem/kv/block_hash.py: cache_keys of its
    context), so the gateway's hashes equal the ones its workers report."""

    token_ids: Sequence[int]
    extra_keys: Partition | tuple
    _memo: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    def get(self, block_size: int, seed: int) -> list[int]:
        key = (block_size, seed)
        if key not in self._memo:
            self._memo[key] = hash_request_blocks(self.token_ids, block_size, self.extra_keys, seed)
        return self._memo[key]


class Router:
    def __init__(self, registry: WorkerPools, index: PrefixIndex, tracker: LoadTracker,
                 policies: dict[str, Policy], limits: AdmissionLimits,
                 on_decision: Callable[[str, Decision], None] | None = None,
                 sessions: SessionTable | None = None, routed: RoutedPrefixes | None = None) -> None:
        """`routed`: prompts committed to each worker count as held there until its KV events
        tell (routed_prefixes.py); None: only what the index holds counts."""
        self.registry = registry
        self.index = index
        self.routed = routed
        self.tracker = tracker
        self.policies = policies          # pool (role) -> policy
        self.limits = limits
        self.on_decision = on_decision    # callback(pool, Decision), for metrics
        self.sessions = sessions if sessions is not None else SessionTable()
        self._seq: dict[str, int] = {}

    def mode(self) -> str:
        """How requests are served now: "pd" when a prefill and a decode worker can take work,
        else "colocated" (role=both workers serve whole requests), else, while one disaggregated
        pool has no healthy worker (dead or none), the other: "decode" or "prefill" (its workers
        serve whole requests; a worker of either role computes a whole request when asked to).
        A pool whose workers are all draining but healthy is being emptied on purpose: no
        fallback then. Raises NoHealthyWorker when no worker can take work."""
        reg = self.registry
        if reg.has_live("prefill") and reg.has_live("decode"):
            return "pd"
        if reg.has_live("both"):
            return "colocated"
        for pool, other in (("decode", "prefill"), ("prefill", "decode")):
            if reg.has_live(pool):
                if any(w.healthy for w in reg.pool(other)):
                    raise NoHealthyWorker(f"every {other} worker is draining; retry later")
                return pool
        raise NoHealthyWorker("no healthy worker is registered with the gateway; retry later")

    def choose(self, pool: str, tokens: HashMemo, session_id: str | None,
               exclude: frozenset[str] = frozenset(), commit: bool = True,
               also: tuple[str, ...] = (), session_ends: bool = False, priority: int = 0,
               tenant: str | None = None) -> Route:
        """Pick a worker of role `pool` (or of a role in `also`, with `pool`'s policy and counter);
        raises NoHealthyWorker (503) or CapacityExceeded (429).

        `exclude` lists workers that just failed this request: avoided while another is live.
        `commit=False` only looks: the decision is neither counted nor advances the pool's
        request counter (round robin) until `commit(pool, route)`. `session_ends`: the request is
        its session's last turn (RequestInfo.session_ends). `priority`: the request's (lower
        first): the loads it meets are those of its priority or a better one (LoadTracker.load).
        `tenant`: the request's, for its fair share of the slots (admission.fair_share_overflow).
        """
        workers = [*self.registry.pool(pool), *(w for role in also for w in self.registry.pool(role))]
        live = [w for w in workers if w.healthy and not w.draining]
        if exclude and any(w.url not in exclude for w in live):
            workers = [w for w in workers if w.url not in exclude]
        ref = next((w for w in live if w.block_size), None)
        block_size = ref.block_size if ref else DEFAULT_BLOCK_SIZE
        hashes = tokens.get(block_size, ref.hash_seed if ref else 0)
        matches = self.index.match(hashes)
        if self.routed is not None:
            for w, n in self.routed.match(hashes).items():
                matches[w] = max(n, matches.get(w, 0))
        seq = self._seq.get(pool, 0)
        home = self.sessions.home(pool, session_id) if session_id is not None else None
        counts = self.sessions.counts(pool)
        snap = Snapshot(
            workers=tuple(self._load(w, matches, counts[w.url], priority, tenant) for w in workers),
            request=RequestInfo(num_prompt_tokens=len(tokens.token_ids), block_hashes=tuple(hashes),
                                block_size=block_size, shared_blocks=matches.get(STORE, 0),
                                session_id=session_id, session_home=home, seq=seq,
                                session_ends=session_ends and session_id is not None))
        fair = fair_share_overflow(tenant or "", self.tracker.open_per_tenant(),
                                   len(live) * self.limits.max_in_flight, self.limits)
        snap = admit(snap, self.limits, pool, fair)
        decision = self.policies[pool].choose(snap)
        chosen = snap.by_id(decision.worker_id)
        worker = next(w for w in workers if w.url == decision.worker_id)
        # what the worker computes: blocks it holds or can load from its tiers or the store are not
        held = max(chosen.cached_blocks, chosen.host_blocks, chosen.disk_blocks,
                   snap.request.shared_blocks)
        uncached = max(0, len(tokens.token_ids) - held * block_size)
        route = Route(worker, decision, chosen.cached_blocks, uncached, chosen, snap.request)
        if commit:
            self.commit(pool, route)
        return route

    def commit(self, pool: str, route: Route) -> None:
        """Count a decision taken: the pool's request counter moves on, the metric sees it, the
        prompt's blocks count as held by the chosen worker (`routed`), and the request's session
        (if any) is bound to the chosen worker in this pool, or, on its last turn, leaves the
        table."""
        self._seq[pool] = self._seq.get(pool, 0) + 1
        req = route.request
        if self.routed is not None and req is not None:
            self.routed.routed(route.worker.url, req.block_hashes)
        if req is not None and req.session_id is not None:
            if req.session_ends:
                self.sessions.end(pool, req.session_id)
            else:
                self.sessions.bind(pool, req.session_id, route.worker.url)
        if self.on_decision is not None:
            self.on_decision(pool, route.decision)

    def _load(self, w: WorkerState, matches: dict[str, int], sessions: int, priority: int,
              tenant: str | None) -> WorkerLoad:
        load = self.tracker.load(w.url, priority)
        s = w.stats
        return WorkerLoad(worker_id=w.url, url=w.url, role=w.role or "both", healthy=w.healthy,
                          draining=w.draining, prefill_tokens=load.prefill_tokens,
                          decode_tokens=load.decode_tokens, running=int(s.get("num_running", 0)),
                          waiting=int(s.get("num_waiting", 0)),
                          in_flight=load.in_flight + load.worse_in_flight, preemptible=load.worse_in_flight,
                          tenant_open=self.tracker.open_on(w.url, tenant),
                          kv_usage=float(s.get("kv_cache_usage", 0.0)),
                          cached_blocks=matches.get(w.url, 0),
                          host_blocks=matches.get(tier_holder(w.url, "host"), 0),
                          disk_blocks=matches.get(tier_holder(w.url, "disk"), 0), sessions=sessions,
                          tier_weights=reported_weights(s.get("kv_tier_weights")))


def reported_weights(value: object) -> tuple[float, ...] | None:
    """A worker's reported tier weights, one non-negative number per tier of KV_TIERS; None for
    anything else (not reported, or a report this gateway cannot read)."""
    if not isinstance(value, (list, tuple)) or len(value) != len(KV_TIERS):
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in value):
        return None
    return tuple(float(x) for x in value)


def pools_policies(default: Policy, prefill: Policy | None = None, decode: Policy | None = None
                   ) -> dict[str, Policy]:
    return {"both": default, "prefill": prefill or default, "decode": decode or default}


__all__ = ["HashMemo", "Route", "Router", "WorkerPools", "WorkerState", "pools_policies"]
