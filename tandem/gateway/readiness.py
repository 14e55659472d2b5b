"""The gateway's readiness: can it serve a request now, and what state are its pools in.

Ready = the router has a way to serve a whole request now (`Router.mode()` does not raise): a
prefill and a decode worker (pd), a colocated worker, or, while one disaggregated pool has no
healthy worker, the other pool's workers serving whole requests. So a pool that restarts does
not take the gateway out of a load balancer while every request still succeeds; only a gateway
that would answer 503 `no_healthy_worker` says 503 on /health. The body shows each pool so that
an operator sees a degraded topology (the mode is "prefill" or "decode" then).

Pure over the registry and router (no I/O), so it is tested with plain objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.errors import NoHealthyWorker
from tandem.router.router import WorkerPools
from tandem.router.snapshot import ROLES


@dataclass(frozen=True)
class PoolState:
    healthy: int    # healthy and taking new requests
    draining: int   # healthy but draining (finishing theirs, taking none)
    total: int      # registered, healthy or not


@dataclass(frozen=True)
class Readiness:
    ready: bool
    mode: str | None          # "pd" | "colocated" | "prefill" | "decode"; None when not ready
    reason: str | None        # why not ready, naming the pools that cannot serve
    pools: dict[str, PoolState]

    def body(self) -> dict:
        """The JSON fields /health adds to its status."""
        out: dict = {"mode": self.mode, "pools": {role: vars(p) for role, p in self.pools.items()}}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def pool_states(registry: WorkerPools) -> dict[str, PoolState]:
    """Every role that has a registered worker (a role with none is absent)."""
    out = {}
    for role in ROLES:
        workers = registry.pool(role)
        if workers:
            out[role] = PoolState(healthy=sum(w.healthy and not w.draining for w in workers),
                                  draining=sum(w.healthy and w.draining for w in workers),
                                  total=len(workers))
    return out


def readiness(registry: WorkerPools, mode) -> Readiness:
    """`mode`: the router's `mode` (raises NoHealthyWorker when nothing can serve)."""
    pools = pool_states(registry)
    try:
        return Readiness(True, mode(), None, pools)
    except NoHealthyWorker as exc:
        empty = [role for role in ROLES if role in pools and pools[role].healthy == 0]
        named = ", ".join(f"{role} ({pools[role].healthy}/{pools[role].total} healthy, "
                          f"{pools[role].draining} draining)" for role in empty)
        reason = f"no pool can serve a request: {named or 'no worker is registered'}; {exc}"
        return Readiness(False, None, reason, pools)
