"""tandem:server_role on /metrics: the worker's role now (following a runtime switch), or gateway."""

import time

from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tests.api.fakes import FakeBackend
from tests.api.internal.test_role_switch import FakeWorker
from tests.api.test_metrics import sample


def roles_in(text: str) -> list[str]:
    return [line.split('"')[1] for line in text.splitlines()
            if line.startswith("tandem:server_role{")]


def test_a_worker_reports_its_role_and_the_new_one_after_a_switch():
    with TestClient(build_app(FakeWorker(role="prefill"), ServerConfig())) as c:
        text = c.get("/metrics").text
        assert roles_in(text) == ["prefill"] and sample(text, "tandem:server_role", role="prefill") == 1
        assert c.post("/internal/role", json={"role": "decode"}).status_code == 202
        deadline = time.monotonic() + 10
        while c.get("/internal/role").json()["switching_to"] is not None:
            assert time.monotonic() < deadline, "switch never finished"
            time.sleep(0.05)
        assert roles_in(c.get("/metrics").text) == ["decode"]


def test_a_server_without_a_kv_cache_reports_gateway():
    with TestClient(build_app(FakeBackend(), ServerConfig())) as c:
        assert roles_in(c.get("/metrics").text) == ["gateway"]
