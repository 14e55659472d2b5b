"""The queue's metrics on the app's /metrics: what this app's dispatcher runs and yields.

  tandem:queue_jobs_running               queued requests running from this app now
  tandem:queue_preemptions_total          queued requests sent back to the queue for interactive ones
  tandem:queue_interactive_requests       interactive engine requests in flight in this app
  tandem:queue_runs_total{outcome}        this app's runs of queued requests by how they ended:
                                          completed, failed, requeued (preempted or stopped),
                                          lost (lease gone, nothing recorded)
Counts of queued and finished jobs live in the shared store (poll a batch for them); the runs
above are this app's share of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

RUN_OUTCOMES = ("completed", "failed", "requeued", "lost")


@dataclass(frozen=True)
class QueueReading:
    running: int
    preemptions: int
    interactive: int
    outcomes: Mapping[str, int]    # a key of RUN_OUTCOMES -> runs that ended so


class QueueCollector(Collector):
    """`read()` -> the queue's figures, read at each scrape."""

    def __init__(self, read: Callable[[], QueueReading]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        r = self._read()
        g = GaugeMetricFamily("tandem:queue_jobs_running", "Queued requests running from this server.")
        g.add_metric([], r.running)
        c = CounterMetricFamily("tandem:queue_preemptions",
                                "Queued requests sent back to the queue for interactive ones.")
        c.add_metric([], r.preemptions)
        i = GaugeMetricFamily("tandem:queue_interactive_requests",
                              "Interactive engine requests in flight in this server.")
        i.add_metric([], r.interactive)
        runs = CounterMetricFamily("tandem:queue_runs",
                                   "This server's runs of queued requests by how they ended.",
                                   labels=("outcome",))
        for outcome in RUN_OUTCOMES:
            runs.add_metric([outcome], r.outcomes.get(outcome, 0))
        yield from (g, c, i, runs)

    def describe(self) -> Iterator[Metric]:
        return iter(())
