"""Prometheus metrics of one app, with vLLM's names under the `tandem:` prefix.

Latencies are measured here, in the HTTP layer, from the delta stream (TTFT, inter-token)
and from the final delta's timings (queue time), so they mean the same for a worker and for
the gateway. Cache and load figures come from Backend.stats() at scrape time. Every app has
its own CollectorRegistry: two apps in one process (tests, gateway + worker) never mix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tandem.types import (KV_HANDOFF_BUCKETS, KV_TIER_COUNTERS, KV_TIERS, TURN_GAP_BUCKETS, EngineStats,
                          FinishReason, RequestDelta)

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0)
_ITL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                1.0, 2.5, 5.0, 10.0, 20.0, 80.0)
_E2E_BUCKETS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0)
_LABELS = ("model_name",)


# KV tiers below the device (tandem.kvstore), labelled by tier; names follow vLLM's KV offloading
# metrics (vllm:external_prefix_cache_*, vllm:kv_offload_tiering_*). Queries and hits in tokens.
_KV_TIER_METRICS = (
    # (counter in EngineStats.kv_tier_stats, metric name, kind, help)
    ("queries", "kv_offload_tiering_queries", "counter",
     "Prompt tokens past the device prefix-cache hit looked up in this tier."),
    ("hits", "kv_offload_tiering_hits", "counter", "Prompt tokens loaded from this tier."),
    ("read_bytes", "kv_offload_tiering_read_bytes", "counter", "Bytes of KV blocks read from this tier."),
    ("write_bytes", "kv_offload_tiering_write_bytes", "counter", "Bytes written to this tier."),
    ("read_seconds", "kv_offload_tiering_read_time", "counter",
     "Seconds spent reading from this tier (load latency, summed over read calls)."),
    ("reads", "kv_offload_tiering_reads", "counter", "Read calls (each a bounded batch of blocks)."),
    ("write_seconds", "kv_offload_tiering_write_time", "counter", "Seconds spent writing to this tier."),
    ("corrupt", "kv_offload_tiering_corrupt_blocks", "counter",
     "Stored blocks that failed their checks (missed, never used)."),
    ("errors", "kv_offload_tiering_errors", "counter",
     "Failed tier calls: store unreachable, disk full, I/O errors."),
    ("skipped", "kv_offload_tiering_stores_skipped", "counter",
     "Blocks not written: no room, tier unavailable, write backlog."),
    ("evicted", "kv_offload_tiering_evicted_blocks", "counter", "Blocks evicted to make room."),
    ("used_bytes", "kv_offload_tiering_usage_bytes", "gauge", "Bytes this tier holds now."),
    ("capacity_bytes", "kv_offload_tiering_capacity_bytes", "gauge", "Bytes this tier may hold."),
    ("available", "kv_offload_tiering_available", "gauge",
     "1 while the tier serves (0: the store is unreachable); summed over workers at the gateway."),
)


def _kv_tier_metrics(s: EngineStats, labels: list[str]) -> Iterator[Metric]:
    values = s.kv_tier_stats or ()   # () without tiers (a gateway with none reporting: 0)
    if not values:
        return
    n = len(KV_TIER_COUNTERS)
    per_tier = {t: dict(zip(KV_TIER_COUNTERS, values[i * n:(i + 1) * n])) for i, t in enumerate(KV_TIERS)}
    queries = max((c["queries"] for c in per_tier.values()), default=0)
    for name, doc, value in (
            ("external_prefix_cache_queries", "Prompt tokens past the device prefix-cache hit, looked "
             "up in the KV tiers (host, disk, store).", queries),
            ("external_prefix_cache_hits", "Prompt tokens loaded from the KV tiers.",
             sum(c["hits"] for c in per_tier.values()))):
        c = CounterMetricFamily(f"tandem:{name}", doc, labels=_LABELS)
        c.add_metric(labels, value)
        yield c
    for counter, name, kind, doc in _KV_TIER_METRICS:
        family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        m = family(f"tandem:{name}", doc, labels=(*_LABELS, "tier"))
        for tier, c in per_tier.items():
            m.add_metric([*labels, tier], c[counter])
        yield m
    if s.kv_tier_weights:   # a worker's own (a gateway reports none)
        g = GaugeMetricFamily("tandem:kv_offload_tiering_load_cost_ratio",
                              "Reading a KV block from this tier against computing it, as this "
                              "worker measures both (>= 1: its hits there are recomputed).",
                              labels=(*_LABELS, "tier"))
        for tier, ratio in zip(KV_TIERS, s.kv_tier_weights):
            g.add_metric([*labels, tier], ratio)
        yield g


def _kv_handoff_metrics(s: EngineStats, labels: list[str]) -> Iterator[Metric]:
    """The decode side's KV pulls (types.py KV_HANDOFF_BUCKETS); nothing without a handoff."""
    values = s.kv_handoff_stats or ()
    if not values:
        return
    n = len(KV_HANDOFF_BUCKETS) + 1
    counts, sum_s, failed = values[:n], values[n], values[n + 1]
    bounds = [*(repr(float(b)) for b in KV_HANDOFF_BUCKETS), "+Inf"]
    cumulative, total = [], 0.0
    for bound, c in zip(bounds, counts):
        total += c
        cumulative.append((bound, total))
    h = HistogramMetricFamily("tandem:kv_handoff_seconds",
                              "Time a decode worker took to pull one request's KV blocks from the "
                              "prefill worker (start of the pull to its confirmation).", labels=_LABELS)
    h.add_metric(labels, cumulative, sum_s)
    yield h
    c = CounterMetricFamily("tandem:kv_handoff_failures",
                            "KV pulls that failed: the source gone or unreachable (the request "
                            "recomputed its prompt), or its blocks released as the request was "
                            "aborted meanwhile.", labels=_LABELS)
    c.add_metric(labels, failed)
    yield c


def _retention_metrics(s: EngineStats, labels: list[str]) -> Iterator[Metric]:
    """KV retention across tool calls (tandem/kv/retention.py); no per-session or per-tenant label."""
    g = GaugeMetricFamily("tandem:kv_retained_blocks",
                          "KV blocks held for sessions' next turns (after a tool call or a hint).",
                          labels=_LABELS)
    g.add_metric(labels, s.retained_blocks)
    yield g
    for name, doc, value in (
            ("kv_retention_hits", "Next turns that arrived while their session's KV was retained.",
             s.retention_hits),
            ("kv_retention_expired", "Retentions that reached their deadline before the next turn.",
             s.retention_expired),
            ("kv_retention_evicted_blocks", "Retained KV blocks taken under memory pressure (demoted "
             "to the host tier when there is one).", s.retention_evicted_blocks)):
        c = CounterMetricFamily(f"tandem:{name}", doc, labels=_LABELS)
        c.add_metric(labels, value)
        yield c
    counts = s.turn_gap_counts
    if len(counts) == len(TURN_GAP_BUCKETS) + 1:
        h = HistogramMetricFamily("tandem:session_turn_gap_seconds",
                                  "Observed pause between a retained turn's end and the session's next "
                                  "turn's arrival (what retention learns from).", labels=_LABELS)
        bounds = [str(b) for b in TURN_GAP_BUCKETS] + ["+Inf"]
        h.add_metric(labels, list(zip(bounds, counts)), s.turn_gap_sum)
        yield h


class _StatsCollector(Collector):
    """Gauges and cumulative counters read from Backend.stats() at each scrape."""

    def __init__(self, stats: Callable[[], EngineStats], model_name: Callable[[], str]) -> None:
        self._stats = stats
        self._model_name = model_name

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        labels = [self._model_name()]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(f"tandem:{name}", doc, labels=_LABELS)
            g.add_metric(labels, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(f"tandem:{name}", doc, labels=_LABELS)
            c.add_metric(labels, value)
            return c

        yield gauge("num_requests_running", "Requests in the running batch.", s.num_running)
        yield gauge("num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting)
        yield gauge("waiting_prefill_tokens",
                    "Prompt tokens not yet computed, over the waiting and running requests.",
                    s.waiting_prefill_tokens)
        yield gauge("kv_cache_usage_perc",
                    "Fraction of KV blocks referenced by live requests (1 = full).",
                    s.kv_cache_usage)
        yield counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
                      s.prefix_cache_queries)
        yield counter("prefix_cache_hits", "Prompt tokens found in the prefix cache.",
                      s.prefix_cache_hits)
        yield counter("num_preemptions", "Requests preempted to free KV blocks.",
                      s.num_preemptions)
        yield counter("spec_decode_num_drafts", "Request-steps that verified draft tokens.",
                      s.spec_num_drafts)
        yield counter("spec_decode_num_draft_tokens", "Draft tokens verified by the target.",
                      s.spec_num_draft_tokens)
        yield counter("spec_decode_num_accepted_tokens", "Draft tokens the target accepted.",
                      s.spec_num_accepted_tokens)
        per_pos = CounterMetricFamily("tandem:spec_decode_num_accepted_tokens_per_pos",
                                      "Accepted draft tokens by their position in the draft.",
                                      labels=(*_LABELS, "position"))
        for pos, n in enumerate(s.spec_accepted_per_pos):
            per_pos.add_metric([*labels, str(pos)], n)
        yield per_pos
        drafted = s.spec_num_draft_tokens
        yield gauge("spec_decode_acceptance_rate", "Accepted over verified draft tokens, since start.",
                    s.spec_num_accepted_tokens / drafted if drafted else 0.0)
        yield gauge("spec_decode_mean_accepted_length",
                    "Tokens per step of a request that verified drafts: accepted drafts plus one.",
                    1.0 + s.spec_num_accepted_tokens / s.spec_num_drafts if s.spec_num_drafts else 0.0)
        yield from _kv_tier_metrics(s, labels)
        yield from _kv_handoff_metrics(s, labels)
        yield from _retention_metrics(s, labels)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # dynamic: described at scrape time only


class ServerMetrics:
    """The metrics of one app. `model_name` is read lazily: the backend may load on startup."""

    def __init__(self, stats: Callable[[], EngineStats], model_name: Callable[[], str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._model_name = model_name
        r = self.registry
        self.ttft = Histogram("tandem:time_to_first_token_seconds",
                              "Time from arrival to the first generated token.", _LABELS,
                              buckets=_TTFT_BUCKETS, registry=r)
        self.itl = Histogram("tandem:inter_token_latency_seconds",
                             "Time between successive token deltas of a request.", _LABELS,
                             buckets=_ITL_BUCKETS, registry=r)
        self.e2e = Histogram("tandem:e2e_request_latency_seconds",
                             "Time from arrival to the final delta.", _LABELS,
                             buckets=_E2E_BUCKETS, registry=r)
        self.queue = Histogram("tandem:request_queue_time_seconds",
                               "Time from arrival to first scheduling (engine timings).", _LABELS,
                               buckets=_TTFT_BUCKETS, registry=r)
        self.prompt_tokens = Counter("tandem:prompt_tokens", "Prompt tokens of finished requests.",
                                     _LABELS, registry=r)
        self.generation_tokens = Counter("tandem:generation_tokens",
                                         "Tokens generated by finished requests.", _LABELS,
                                         registry=r)
        self.success = Counter("tandem:request_success", "Finished requests by finish reason.",
                               (*_LABELS, "finished_reason"), registry=r)
        r.register(_StatsCollector(stats, model_name))

        self._bound: dict[str, _Bound] = {}

    def observer(self, arrival: float) -> "RequestObserver":
        """Track one engine request that arrived at `arrival` (time.monotonic())."""
        name = self._model_name()
        bound = self._bound.get(name)
        if bound is None:
            bound = self._bound[name] = _Bound(self, name)
        return RequestObserver(bound, arrival)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Bound:
    """The metrics' children for one model name, resolved once (labels() takes a lock)."""

    def __init__(self, m: ServerMetrics, name: str) -> None:
        self.ttft = m.ttft.labels(name)
        self.itl = m.itl.labels(name)
        self.e2e = m.e2e.labels(name)
        self.queue = m.queue.labels(name)
        self.prompt_tokens = m.prompt_tokens.labels(name)
        self.generation_tokens = m.generation_tokens.labels(name)
        self._success = m.success
        self._name = name
        for reason in FinishReason:   # every outcome's series from 0: a first abort shows in rate()
            self.success(reason.value)

    def success(self, reason: str):
        return self._success.labels(self._name, reason)


class RequestObserver:
    """Feeds one engine request's deltas into the metrics, with the receive times."""

    __slots__ = ("_m", "_arrival", "_last_token", "_counted", "finished")

    def __init__(self, bound: _Bound, arrival: float) -> None:
        self._m = bound
        self._arrival = arrival
        self._last_token: float | None = None
        self._counted = 0          # output tokens seen so far
        self.finished = False

    def on_delta(self, delta: RequestDelta, now: float) -> None:
        m = self._m
        if delta.new_token_ids:
            if self._last_token is None:
                m.ttft.observe(now - self._arrival)
            else:
                m.itl.observe(now - self._last_token)
            self._last_token = now
            self._counted += len(delta.new_token_ids)
        if delta.finished and not self.finished:
            self.finished = True
            m.e2e.observe(now - self._arrival)
            t = delta.timings
            if t is not None and t.first_scheduled is not None:
                m.queue.observe(max(0.0, t.first_scheduled - t.arrival))
            m.prompt_tokens.inc(delta.num_prompt_tokens)
            m.generation_tokens.inc(delta.num_output_tokens or self._counted)
            m.success(delta.finish_reason.value if delta.finish_reason else "stop").inc()

    def on_close(self) -> None:
        """The stream ended without a final delta (client gone, error): count an abort."""
        if not self.finished:
            self.finished = True
            self._m.success("abort").inc()
