"""Bad input at registration, across hosts: the gateway refuses a worker that advertises a
loopback address (it would reach itself, not the worker) or an address it cannot reach (here a
host where nothing listens), each with a message naming the address; the worker logs the
refusal as an error and keeps trying, and is never routed to."""

from __future__ import annotations

import pytest

from tandem.testing.hosts import WORKER_PORT

pytestmark = pytest.mark.timeout(120)


def test_loopback_and_unreachable_addresses_are_refused(net, cluster):
    g, w0, w1, empty = (net.add_host(n) for n in ("gw0", "w0", "w1", "empty"))
    cluster.gateway("gw0", g)
    gw = cluster.url("gw0")
    loopback = f"http://127.0.0.1:{WORKER_PORT}"
    nowhere = empty.url(WORKER_PORT)   # a host of the network where nothing listens
    cluster.worker("w0", w0, "both", gateway=gw, transport=None, extra=["--advertise-url", loopback])
    cluster.worker("w1", w1, "both", gateway=gw, transport=None, extra=["--advertise-url", nowhere])

    def refused(name: str, text: str) -> bool:
        log = cluster.procs[name].log.read_text()
        return log.count("refused to register this worker") >= 2 and text in log

    cluster.wait_until("w0's refusal logged twice", lambda: refused(
        "w0", f"worker address {loopback} is a loopback address"), 90)
    cluster.wait_until("w1's refusal logged twice", lambda: refused(
        "w1", f"cannot reach worker address {nowhere}"), 90)
    assert cluster.workers_seen("gw0") == []
    assert cluster.procs["w0"].alive() and cluster.procs["w1"].alive()   # they keep trying
