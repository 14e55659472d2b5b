"""The gateway's admission gate from its config: None when --no-fair-queue."""

from __future__ import annotations

from functools import partial

from prometheus_client import CollectorRegistry

from tandem.gateway.admission.capacity import has_capacity
from tandem.gateway.admission.gate import AdmissionGate
from tandem.gateway.admission.metrics import QueueMetrics
from tandem.gateway.config import GatewayConfig
from tandem.gateway.registry import Registry
from tandem.router.load_tracker import LoadTracker
from tandem.router.router import Router


def build_gate(config: GatewayConfig, router: Router, registry: Registry, tracker: LoadTracker,
               metrics_registry: CollectorRegistry) -> AdmissionGate | None:
    if not config.fair_queue.enabled:
        return None
    metrics = QueueMetrics(metrics_registry)
    # ticks as often as the workers' stats can change, and at least 10 times a second
    gate = AdmissionGate(config.fair_queue,
                         partial(has_capacity, router, registry, tracker, config.admission),
                         metrics, tick_s=min(0.1, config.registry.poll_interval_s))
    q = gate.queue
    metrics.watch(lambda: {t: (q.depth(t), q.queued_tokens(t)) for t in q.depths()})
    return gate
