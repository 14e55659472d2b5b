"""The queue's metrics on the app's /metrics: what this app's dispatcher runs and yields.

  tandem:queue_jobs_running               queued requests running from this app now
  tandem:queue_preemptions_total          queued requests sent back to the queue for interactive ones
  tandem:queue_interactive_requests       interactive engine requests in flight in this app
Counts of queued and finished jobs live in the shared store (poll a batch for them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class QueueCollector(Collector):
    """`read()` -> (running, preemptions, interactive in flight), read at each scrape."""

    def __init__(self, read: Callable[[], tuple[int, int, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        running, preemptions, interactive = self._read()
        g = GaugeMetricFamily("tandem:queue_jobs_running", "Queued requests running from this server.")
        g.add_metric([], running)
        c = CounterMetricFamily("tandem:queue_preemptions",
                                "Queued requests sent back to the queue for interactive ones.")
        c.add_metric([], preemptions)
        i = GaugeMetricFamily("tandem:queue_interactive_requests",
                              "Interactive engine requests in flight in this server.")
        i.add_metric([], interactive)
        yield from (g, c, i)

    def describe(self) -> Iterator[Metric]:
        return iter(())
