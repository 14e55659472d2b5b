"""Whether the fleet can take one more request now, by the router's own saturation rule.

A worker is saturated by `tandem.router.admission.is_saturated` (requests the gateway has open
on it, requests it reports waiting, estimated tokens), read from the same load tracker and
stats the router reads, for the request's priority as the router reads them, so a request the
gate lets through finds a worker the router accepts.
The fleet has capacity when some live worker of the pool that serves a request's last pass
(colocated: role both; disaggregated: decode, or both; one pool left: that pool) is not
saturated, or when no worker is live at all: then the router answers 503 at once rather than
the request waiting for workers that may never come.

Disaggregated, a released request is counted on its prefill worker first and reaches the decode
pool only when its prefill is done: the requests open on prefill workers are headed for decode,
so the pool has capacity only while its unsaturated workers' room (`max_in_flight` less what
the gateway has open on each) exceeds them. Without that, every waiting request would be
released while the first ones prefill, and be refused at its decode pass.
"""

from __future__ import annotations

from tandem.errors import NoHealthyWorker
from tandem.gateway.registry import Registry
from tandem.router.admission import AdmissionLimits, fair_allowance, fair_share_overflow, is_saturated
from tandem.router.load_tracker import LoadTracker
from tandem.router.router import Router
from tandem.router.snapshot import WorkerLoad

_POOLS = {"colocated": ("both",), "pd": ("decode", "both"), "decode": ("decode",),
          "prefill": ("prefill",)}


def _saturated(url: str, stats: dict, tracker: LoadTracker, limits: AdmissionLimits,
               priority: int, tenant: str, fair_overflow: int) -> bool:
    load = tracker.load(url, priority)
    allowance = fair_allowance(fair_overflow, tracker.open_on(url, tenant))
    return is_saturated(WorkerLoad(worker_id=url, url=url, role="both",
                                   prefill_tokens=load.prefill_tokens,
                                   decode_tokens=load.decode_tokens,
                                   in_flight=load.in_flight + load.worse_in_flight,
                                   preemptible=load.worse_in_flight,
                                   waiting=int(stats.get("num_waiting") or 0)), limits, allowance)


def has_capacity(router: Router, registry: Registry, tracker: LoadTracker,
                 limits: AdmissionLimits, priority: int = 0, tenant: str = "") -> bool:
    """Whether a request of `priority` and `tenant` can be placed now (the router's rule for
    it: open requests of a worse priority, and a tenant below its fair share, make room over
    the cap, admission.py)."""
    try:
        mode = router.mode()
    except NoHealthyWorker:
        return True
    live = [w for role in _POOLS[mode] for w in registry.pool(role) if w.healthy and not w.draining]
    if not live:
        return True
    fair = fair_share_overflow(tenant, tracker.open_per_tenant(), len(live) * limits.max_in_flight, limits)
    free = [w for w in live if not _saturated(w.url, w.stats, tracker, limits, priority, tenant, fair)]
    if mode != "pd" or not free:
        return bool(free)
    headed = sum(tracker.load(w.url).in_flight for w in registry.pool("prefill"))
    room = sum(max(0, limits.max_in_flight - tracker.load(w.url).in_flight) for w in free)
    return headed < room
