"""Gateway-only metrics, added to the app's registry beside the server's (TTFT, ITL, e2e).

The server layer already measures TTFT, inter-token latency and end-to-end latency from the
delta stream the gateway's backend yields, i.e. as the gateway's clients see them. Here:
routing decisions, estimated in-flight tokens per worker, worker health, retries and
migrations, and the cached-token ratio over the gateway's requests.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tandem.gateway.registry import Registry
from tandem.router.load_tracker import LoadTracker
from tandem.router.policies.placement import Placement
from tandem.router.snapshot import Decision


class _WorkerCollector(Collector):
    def __init__(self, registry: Registry, tracker: LoadTracker, totals: dict[str, int]) -> None:
        self._registry = registry
        self._tracker = tracker
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        labels = ("worker", "role")
        prefill = GaugeMetricFamily("tandem:gateway_inflight_prefill_tokens",
                                    "Estimated prompt tokens sent to a worker and not yet processed.",
                                    labels=labels)
        decode = GaugeMetricFamily("tandem:gateway_inflight_decode_tokens",
                                   "Estimated tokens in the contexts of a worker's active requests.",
                                   labels=labels)
        inflight = GaugeMetricFamily("tandem:gateway_inflight_requests",
                                     "Requests the gateway has open on a worker.", labels=labels)
        healthy = GaugeMetricFamily("tandem:gateway_worker_healthy",
                                    "1 if the worker is healthy and not draining.", labels=labels)
        restarts = CounterMetricFamily("tandem:gateway_worker_restarts",
                                       "New instances of a worker seen at its URL (it restarted).",
                                       labels=labels)
        for w in self._registry.all():
            lv = [w.url, w.role or "unknown"]
            load = self._tracker.load(w.url)
            prefill.add_metric(lv, load.prefill_tokens)
            decode.add_metric(lv, load.decode_tokens)
            inflight.add_metric(lv, load.in_flight)
            healthy.add_metric(lv, 1.0 if w.healthy and not w.draining else 0.0)
            restarts.add_metric(lv, w.restarts)
        yield from (prefill, decode, inflight, healthy, restarts)
        prompt, cached = self._totals["prompt"], self._totals["cached"]
        ratio = GaugeMetricFamily("tandem:gateway_cached_token_ratio",
                                  "Cached prompt tokens / prompt tokens over the gateway's requests.")
        ratio.add_metric([], cached / prompt if prompt else 0.0)
        yield ratio

    def describe(self) -> Iterator[Metric]:
        return iter(())


class GatewayMetrics:
    def __init__(self, prom: CollectorRegistry, registry: Registry, tracker: LoadTracker) -> None:
        self.decisions = Counter("tandem:gateway_routing_decisions",
                                 "Routing decisions by pool, policy and reason.",
                                 ("pool", "policy", "reason"), registry=prom)
        self.retries = Counter("tandem:gateway_retries",
                               "Requests retried on another worker before their first token.",
                               ("pool",), registry=prom)
        self.migrations = Counter("tandem:gateway_migrations",
                                  "Streams moved to another worker after their first token.",
                                  registry=prom)
        self.local_prefills = Counter("tandem:gateway_local_prefills",
                                      "Disaggregated-mode requests served whole by their decode worker "
                                      "(the placement policy's local decisions).",
                                      registry=prom)
        self.placements = Counter("tandem:gateway_prefill_placements",
                                  "Disaggregated-mode placement decisions: where the prompt was "
                                  "computed (local: the decode worker; remote: a prefill worker) and why.",
                                  ("where", "reason"), registry=prom)
        self.prompt_tokens = Counter("tandem:gateway_prompt_tokens",
                                     "Prompt tokens of requests the gateway served.", registry=prom)
        self.cached_tokens = Counter("tandem:gateway_cached_tokens",
                                     "Prompt tokens the serving worker found in its prefix cache.",
                                     registry=prom)
        self._totals = {"prompt": 0, "cached": 0}
        prom.register(_WorkerCollector(registry, tracker, self._totals))

    def on_decision(self, pool: str, d: Decision) -> None:
        self.decisions.labels(pool, d.policy, d.reason).inc()

    def on_placement(self, p: Placement) -> None:
        self.placements.labels("local" if p.local else "remote", p.reason).inc()
        if p.local:
            self.local_prefills.inc()

    def on_prompt(self, prompt_tokens: int, cached_tokens: int) -> None:
        self._totals["prompt"] += prompt_tokens
        self._totals["cached"] += cached_tokens
        self.prompt_tokens.inc(prompt_tokens)
        self.cached_tokens.inc(cached_tokens)
