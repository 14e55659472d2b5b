"""The gateway queue's metrics (gate.py), in the app's registry.

- tandem:gateway_queue_depth{tenant}: requests waiting at the gateway, per tenant
- tandem:gateway_queue_tokens{tenant}: their cost in tokens (prompt + capped max_tokens)
- tandem:gateway_queue_wait_seconds: time requests waited (those that passed at once: not counted)
- tandem:gateway_queue_rejected_total{tenant,reason}: queue_full (429) or timeout (503)
The tenant label is the tenant as authentication names it: "key-<i>" for the i-th --api-key, an
account's id with --accounts, "" without keys; its values are bounded by the operator's keys and
accounts (a tenant that once queued stays listed with depth 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _DepthCollector(Collector):
    def __init__(self, depths: Callable[[], dict[str, tuple[int, int]]], seen: set[str]) -> None:
        self._depths = depths
        self._seen = seen     # every tenant that ever waited (bounded by the keys and accounts)

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("tandem:gateway_queue_depth",
                                  "Requests waiting at the gateway for a worker, per tenant.",
                                  labels=("tenant",))
        tokens = GaugeMetricFamily("tandem:gateway_queue_tokens",
                                   "Cost in tokens of the requests waiting at the gateway, per tenant.",
                                   labels=("tenant",))
        now = self._depths()
        self._seen.update(now)
        for t in sorted(self._seen):
            n, tok = now.get(t, (0, 0))
            depth.add_metric([t], n)
            tokens.add_metric([t], tok)
        yield depth
        yield tokens


class QueueMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.wait = Histogram("tandem:gateway_queue_wait_seconds",
                              "Seconds a request waited at the gateway for a worker.",
                              buckets=WAIT_BUCKETS, registry=registry)
        self._rejected = Counter("tandem:gateway_queue_rejected",
                                 "Requests refused by the gateway's queue: queue_full (429) or "
                                 "timeout (503).", labelnames=("tenant", "reason"), registry=registry)
        self._registry = registry
        self._seen: set[str] = set()

    def watch(self, depths: Callable[[], dict[str, tuple[int, int]]]) -> None:
        """Export the queue's depths per tenant, read at each scrape."""
        self._registry.register(_DepthCollector(depths, self._seen))

    def queued(self, tenant: str) -> None:
        self._seen.add(tenant)

    def waited(self, seconds: float) -> None:
        self.wait.observe(max(0.0, seconds))

    def rejected(self, tenant: str, reason: str) -> None:
        self._seen.add(tenant)
        self._rejected.labels(tenant, reason).inc()
