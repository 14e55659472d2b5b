"""Prefill on one host, decode on another, the gateway on a third: the KV handoff crosses hosts
(built-in tcp transport and Mooncake Transfer Engine over tcp), greedy output is the one engine's
token for token, nothing listens on or dials a loopback address, and no KV block stays held."""

from __future__ import annotations

import pytest

from tests.e2e.hosts.client import complete, prompt, stream, text_of, wait_no_blocks_held

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("transport", ["tcp", "mooncake"])
def test_handoff_across_hosts_is_the_one_engine_output(net, cluster, reference, transport):
    p0, d0, gw0 = net.add_host("p0"), net.add_host("d0"), net.add_host("gw0")
    cluster.worker("p0", p0, "prefill", transport=transport)
    cluster.worker("d0", d0, "decode", transport=transport)
    cluster.gateway("gw0", gw0, prefill=[cluster.url("p0")], decode=[cluster.url("d0")],
                    extra=["--prefill-placement", "remote"])
    cluster.wait_ready()
    gw = cluster.url("gw0")
    for i in range(3):
        ids = prompt(i, 40 + 17 * i)
        want, _ = reference(ids, 24)
        r = complete(gw, ids, 24)
        assert text_of(r) == want
        assert r.headers["x-tandem-prefill"] == cluster.url("p0")
        assert r.headers["x-tandem-decode"] == cluster.url("d0")
    s = stream(gw, prompt(9, 70), 32)
    assert s.error is None and s.text == reference(prompt(9, 70), 32)[0]
    cluster.check_addresses()
    wait_no_blocks_held(cluster, ["p0", "d0"])
    # the decode worker pulled every prompt's KV: none was recomputed after a failed pull
    assert "KV load for" not in cluster.procs["d0"].tail(100_000)
