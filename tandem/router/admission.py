"""Admission: before a policy runs, decide 503 (no healthy worker) or 429 (all saturated).

Saturation is per worker, from limits on what the gateway sees; a saturated worker stays
healthy but takes no new request until its load drops. Except a session's own: a request whose
session lives on a worker (RequestInfo.session_home) may go there over `max_in_flight` by up to
`session_overflow` requests (by default a quarter of it, at least one): its history is cached
there, and elsewhere it would be computed again; there it waits in the worker's queue, where a
better priority preempts a worse one. Likewise a request may go over `max_in_flight` by up to
as many (at most `session_overflow`) as the worker has open requests of a worse priority
(WorkerLoad.preemptible): the worker gives it one of their slots rather than queue it behind them.
And a request whose tenant has fewer requests open than its fair share of the fleet's slots
(max_in_flight x live workers / tenants with requests open, its own counted), while another tenant
has more than its own, goes over it as a session's home does, and its tenant's own open requests
on the worker do not count against it either (`fair_share_overflow`, `fair_allowance`): the small
tenant waits for no other tenant's request to end, nor for its own earlier ones (the worker
serves its prefill first among equals, tandem/engine/scheduler.py). Others fill a worker only
to max_in_flight, so the allowances add up to about max_in_flight + 2 x session_overflow requests
open on a worker, plus the small tenant's own (fewer than its share): give the workers that many
sequence slots (--max-num-seqs); a request over them waits in the worker's queue, where its
tenant goes first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tandem.errors import CapacityExceeded, NoHealthyWorker
from tandem.router.snapshot import Snapshot, WorkerLoad


@dataclass(frozen=True)
class AdmissionLimits:
    max_in_flight: int = 256          # requests the gateway keeps open on one worker
    max_waiting: int = 128            # requests a worker reports waiting
    max_prefill_tokens: int = 262144  # estimated pending prefill tokens on one worker
    # estimated tokens on one worker, pending prefill plus active contexts (None: no bound)
    max_tokens: int | None = None
    # requests of its sessions a worker takes over max_in_flight (None: max(1, max_in_flight // 4))
    session_overflow: int | None = None
    # a tenant below its fair share of the slots goes over max_in_flight by the home overflow
    tenant_overflow: bool = True

    @property
    def home_overflow(self) -> int:
        return max(1, self.max_in_flight // 4) if self.session_overflow is None else self.session_overflow


def is_saturated(w: WorkerLoad, limits: AdmissionLimits, overflow: int = 0) -> bool:
    """Over a limit; `overflow`: requests allowed over max_in_flight (a session's home); a
    request of a better priority than some open ones is allowed over it by as many of them more
    (at most the home overflow)."""
    overflow += min(limits.home_overflow, w.preemptible)
    return (w.in_flight >= limits.max_in_flight + overflow or w.waiting >= limits.max_waiting
            or w.prefill_tokens >= limits.max_prefill_tokens
            or (limits.max_tokens is not None
                and w.prefill_tokens + w.decode_tokens >= limits.max_tokens))


def fair_share_overflow(tenant: str, open_per_tenant: Mapping[str, int], slots: int,
                        limits: AdmissionLimits) -> int:
    """Requests over max_in_flight that a request of `tenant` may take on a worker: the home
    overflow while the tenant holds fewer than its fair share of the fleet's `slots` and another
    tenant holds more than its own; else 0 (and always 0 with `tenant_overflow` off)."""
    if not limits.tenant_overflow:
        return 0
    tenants = {*open_per_tenant, tenant}
    share = slots / len(tenants)
    below = open_per_tenant.get(tenant, 0) < share
    return limits.home_overflow if below and any(n > share for n in open_per_tenant.values()) else 0


def fair_allowance(fair_overflow: int, tenant_open: int) -> int:
    """Requests over max_in_flight a request may take on a worker where its tenant has
    `tenant_open` open: while the tenant is below its fair share (`fair_overflow` > 0), its own
    open requests there count as allowance too; else 0."""
    return fair_overflow + tenant_open if fair_overflow else 0


def admit(snap: Snapshot, limits: AdmissionLimits, pool: str, fair_overflow: int = 0) -> Snapshot:
    """The snapshot with `saturated` marked; raises NoHealthyWorker or CapacityExceeded.
    `fair_overflow`: the request's tenant's (fair_share_overflow)."""
    home = snap.request.session_home
    workers = tuple(replace(w, saturated=is_saturated(
        w, limits, max(fair_allowance(fair_overflow, w.tenant_open),
                       limits.home_overflow if w.worker_id == home else 0)))
                    for w in snap.workers)
    live = [w for w in workers if w.healthy and not w.draining]
    if not live:
        raise NoHealthyWorker(f"no healthy {pool} worker is registered; retry later")
    if all(w.saturated for w in live):
        raise CapacityExceeded(f"all {len(live)} {pool} workers are at capacity; retry later")
    return replace(snap, workers=workers)
