"""A worker's first registration is checked (tandem/gateway/registration_check.py): a loopback
address on a gateway serving several hosts and an address the gateway cannot reach are refused
with a 400 naming the address; later heartbeats are not probed again."""

from __future__ import annotations

import asyncio
import time

import httpx
from starlette.testclient import TestClient

from tandem.gateway.app import build_gateway_app, model_facts
from tandem.gateway.config import GatewayConfig, RegistryConfig
from tandem.gateway.registration_check import is_loopback, loopback_refusal
from tests.gateway.fake_workers import FakeCluster, worker_http
from tests.gateway.test_app import client_for, model_dir  # noqa: F401 - the fixture

REMOTE = "http://10.0.0.7:9400"


def test_loopback_addresses():
    assert all(map(is_loopback, ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LocalHost")))
    assert not any(map(is_loopback, ("10.0.0.7", "0.0.0.0", "worker-0.pool", "", None)))


def test_loopback_worker_refused_only_by_a_gateway_serving_other_hosts():
    assert loopback_refusal("http://127.0.0.1:9001", "127.0.0.1", allow=False) is None
    assert loopback_refusal("http://localhost:9001", "::1", allow=False) is None
    assert loopback_refusal("http://10.0.0.7:9001", "10.0.0.1", allow=False) is None
    assert loopback_refusal("http://127.0.0.1:9001", "0.0.0.0", allow=True) is None
    why = loopback_refusal("http://127.0.0.1:9001", "10.0.0.1", allow=False)
    assert "http://127.0.0.1:9001" in why and "--advertise-url" in why


def test_loopback_registration_refused_on_a_multi_host_gateway(model_dir):  # noqa: F811
    cluster, c = client_for(model_dir, {}, host="0.0.0.0")
    cluster.roles["http://127.0.0.1:9500"] = "both"
    with c:
        r = c.post("/internal/register", json={"url": "http://127.0.0.1:9500", "role": "both"})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == "advertised_loopback" and err["param"] == "url"
        assert "http://127.0.0.1:9500" in err["message"] and "0.0.0.0" in err["message"]
        assert c.get("/internal/workers").json()["workers"] == []


def test_unreachable_worker_refused_naming_its_address(model_dir):  # noqa: F811
    cluster, c = client_for(model_dir, {})
    cluster.roles[REMOTE] = "both"
    cluster.dead.add(REMOTE)
    with c:
        r = c.post("/internal/register", json={"url": REMOTE, "role": "both"})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == "worker_unreachable" and err["param"] == "url"
        assert f"cannot reach worker address {REMOTE}" in err["message"]
        assert c.get("/internal/workers").json()["workers"] == []
        cluster.dead.discard(REMOTE)   # the network fixed: the next heartbeat gets in
        r = c.post("/internal/register", json={"url": REMOTE, "role": "both"})
        assert r.status_code == 200 and r.json()["ok"]
        cluster.dead.add(REMOTE)       # a known worker's heartbeat is not probed again
        assert c.post("/internal/register", json={"url": REMOTE, "role": "both"}).status_code == 200


class SlowHealth(FakeCluster):
    """Its /health never answers in time: a host whose packets are dropped."""

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            await asyncio.sleep(30)
        return await super().handle(request)


def test_probe_is_bounded_by_its_timeout(model_dir):  # noqa: F811
    cluster = SlowHealth({REMOTE: "both"})
    config = GatewayConfig(model_path=model_dir, served_model_name="tiny",
                           registry=RegistryConfig(poll_interval_s=30, register_probe_timeout_s=0.3))
    tok, name, max_len = model_facts(model_dir, "tiny")
    with TestClient(build_gateway_app(config, tok, name, max_len, worker_http=worker_http(cluster))) as c:
        t0 = time.monotonic()
        r = c.post("/internal/register", json={"url": REMOTE, "role": "both"})
        assert time.monotonic() - t0 < 5
        assert r.status_code == 400 and r.json()["error"]["code"] == "worker_unreachable"
        assert "0.3 s allowed" in r.json()["error"]["message"]
