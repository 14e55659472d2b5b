"""`tandem:server_role{role}` on /metrics: 1, labelled with the role this server serves in now.

The role is read at each scrape, so a worker switched at runtime (role_switch.py) reports its new
role from the switch's end on. A dashboard joins it on `instance` to break a worker's own metrics
down by role, and to leave out the gateway's (role "gateway"), whose engine figures are the sums of
its workers' reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

GATEWAY_ROLE = "gateway"   # a server without a KV cache of its own


class RoleCollector(Collector):
    def __init__(self, role: Callable[[], str]) -> None:
        self._role = role

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("tandem:server_role", "1, labelled with the role this server serves "
                              "in: prefill, decode, both, or gateway.", labels=("role",))
        g.add_metric([self._role()], 1.0)
        yield g

    def describe(self) -> Iterator[Metric]:
        return iter(())
