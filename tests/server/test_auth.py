"""Bearer authentication, and the tenant each key names."""

from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tests.server.fakes import FakeBackend

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_bearer_auth():
    app = build_app(FakeBackend(), ServerConfig(api_keys=("k1", "k2")))
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", json=BODY)
        assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"
        assert r.json()["error"]["code"] == "invalid_api_key"
        r = c.post("/v1/chat/completions", json=BODY, headers={"authorization": "Bearer nope"})
        assert r.status_code == 401
        r = c.post("/v1/chat/completions", json=BODY, headers={"authorization": "Bearer k2"})
        assert r.status_code == 200
        r = c.post("/client/v4/accounts/a/ai/run/fake-model", json={"prompt": "x"})
        assert r.status_code == 401 and r.json()["errors"][0]["code"] == 10000
        assert c.get("/internal/stats").status_code == 401
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200


def test_tenant_is_the_api_key_it_authenticated_with():
    backend = FakeBackend()
    with TestClient(build_app(backend, ServerConfig(api_keys=("k1", "k2")))) as c:
        for key in ("k2", "k1"):
            r = c.post("/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {key}"})
            assert r.status_code == 200
    assert [q.context.tenant for q in backend.seen] == ["key-1", "key-0"]
