"""A worker's runtime role switch (POST /internal/role): drain, then switch in-process."""

import asyncio
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from starlette.testclient import TestClient

from tandem.config import CacheConfig
from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.internal.role_switch import RoleConflict, RoleSwitchConfig, WorkerRole
from tandem.types import EngineRequest, SamplingParams
from tests.api.fakes import FakeBackend


@dataclass
class FakeWorker(FakeBackend):
    """FakeBackend as a WorkerBackend: a role, a layout, a transport (or none)."""

    role: str = "prefill"
    model_path: str = "/models/fake"
    transport_address: str | None = "127.0.0.1:7000"
    kv_layout: object = field(default_factory=lambda: SimpleNamespace(to_dict=lambda: {"block_size": 4}))
    config: object = field(default_factory=lambda: SimpleNamespace(cache=CacheConfig()))
    kept_blocks: int = 0    # blocks pinned for a decode worker's pull (not free)

    def stats(self):
        s = super().stats()
        return type(s)(**{**s.__dict__, "num_blocks_free": s.num_blocks_free - self.kept_blocks})


FAST = RoleSwitchConfig(drain_timeout_s=5.0, poll_s=0.01)


def test_idle_worker_switches_at_once_over_http():
    with TestClient(build_app(FakeWorker(), ServerConfig())) as c:
        assert c.get("/internal/stats").json()["role"] == "prefill"
        r = c.post("/internal/role", json={"role": "decode"})
        assert r.status_code == 202 and r.json()["switching_to"] == "decode"
        assert c.get("/internal/stats").json()["switching_to"] == "decode"
        deadline = time.monotonic() + 10
        while c.get("/internal/role").json()["switching_to"] is not None:
            assert time.monotonic() < deadline, "switch never finished"
            time.sleep(0.05)
        got = c.get("/internal/role").json()
        assert got["role"] == "decode" and got["role_switches"] == 1
        s = c.get("/internal/stats").json()
        assert s["role"] == "decode" and s["switching_to"] is None
        # already decode: nothing to do
        r = c.post("/internal/role", json={"role": "decode"})
        assert r.status_code == 200 and r.json()["role_switches"] == 1


def test_bad_requests_and_conflicts_over_http():
    with TestClient(build_app(FakeWorker(transport_address=None, role="both"), ServerConfig())) as c:
        r = c.post("/internal/role", json={"role": "mixed"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "role"
        r = c.post("/internal/role", json={"role": "decode", "drain_timeout_s": -1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "drain_timeout_s"
        r = c.post("/internal/role", json={"role": "prefill"})   # no transport for a handoff
        assert r.status_code == 409 and "--kv-transport" in r.json()["error"]["message"]
        assert c.get("/internal/role").json()["role"] == "both"


def test_gateway_app_has_no_role():
    with TestClient(build_app(FakeBackend(), ServerConfig())) as c:
        assert c.get("/internal/role").status_code == 404
        assert c.get("/internal/stats").json()["switching_to"] is None


def test_drain_waits_for_running_requests_and_kept_blocks():
    async def go():
        w = FakeWorker(token_delay=0.02)
        roles = WorkerRole(w, FAST)
        stream = w.generate(EngineRequest("r1", [5, 6], SamplingParams(max_tokens=10)))
        await anext(stream)                  # running: one request in the engine
        w.kept_blocks = 3                    # and a finished prefill's blocks await their pull
        assert roles.request("decode") and roles.switching_to == "decode"
        assert roles.request("decode")       # the same request again: still under way
        try:
            roles.request("both")
            raise AssertionError("a second switch must be refused")
        except RoleConflict:
            pass
        async for _ in stream:               # the request runs to its end
            pass
        await asyncio.sleep(0.1)
        assert roles.role == "prefill" and roles.switching_to == "decode"   # the pin holds it
        roles.admitting = 1                  # a call being admitted holds it too
        w.kept_blocks = 0                    # the decode worker pulled
        await asyncio.sleep(0.1)
        assert roles.role == "prefill"
        roles.admitting = 0
        await asyncio.wait_for(roles.wait(), 5)
        assert (roles.role, roles.switching_to, roles.switches, roles.timed_out) == ("decode", None, 1, 0)
    asyncio.run(go())


def test_drain_timeout_switches_anyway():
    async def go():
        w = FakeWorker(kept_blocks=2)        # never released
        roles = WorkerRole(w, FAST)
        assert roles.request("decode", drain_timeout_s=0.1)
        await asyncio.wait_for(roles.wait(), 5)
        assert (roles.role, roles.switches, roles.timed_out) == ("decode", 1, 1)
        assert not roles.request("decode")   # nothing to do
    asyncio.run(go())
