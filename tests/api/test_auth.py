"""Bearer authentication, and the tenant each key names."""

from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.auth import is_internal
from tandem.api.config import ServerConfig
from tests.api.fakes import FakeBackend

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


SECRET = "s3cret-of-the-cluster"
INTERNAL = [("GET", "/internal/stats"), ("GET", "/internal/kv_events"), ("GET", "/internal/role"),
            ("POST", "/internal/role"), ("POST", "/internal/generate"), ("POST", "/internal/kv_release")]


def call(c, method, path, headers=None):
    return c.request(method, path, json={}, headers=headers or {})


def test_internal_routes_take_only_the_cluster_secret():
    app = build_app(FakeBackend(), ServerConfig(api_keys=("k1", "k2"), cluster_secret=SECRET))
    with TestClient(app) as c:
        for method, path in INTERNAL:
            r = call(c, method, path, {"authorization": "Bearer k1"})   # a tenant key: 403
            assert r.status_code == 403, (path, r.text)
            assert r.json()["error"]["code"] == "permission_denied"
            assert "cluster secret" in r.json()["error"]["message"]
            r = call(c, method, path, {"x-api-key": "k2"})
            assert r.status_code == 403, (path, r.text)
            for headers in ({}, {"authorization": "Bearer nope"}, {"x-tandem-cluster-secret": "nope"},
                            {"x-tandem-cluster-secret": SECRET[:-1]}):
                r = call(c, method, path, headers)
                assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", (path, headers)
            for headers in ({"x-tandem-cluster-secret": SECRET}, {"authorization": f"Bearer {SECRET}"},
                            {"x-tandem-cluster-secret": SECRET, "authorization": "Bearer k1"}):
                assert call(c, method, path, headers).status_code not in (401, 403), (path, headers)
        assert c.get("/internal/stats", headers={"x-tandem-cluster-secret": SECRET}).status_code == 200
        # the secret is no tenant key: the API routes still want one
        r = c.post("/v1/chat/completions", json=BODY, headers={"x-tandem-cluster-secret": SECRET})
        assert r.status_code == 401
        r = c.post("/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {SECRET}"})
        assert r.status_code == 401
        r = c.post("/v1/chat/completions", json=BODY, headers={"authorization": "Bearer k1"})
        assert r.status_code == 200
        assert c.get("/health").status_code == 200 and c.get("/metrics").status_code == 200


def test_with_keys_and_no_secret_nothing_opens_internal_routes():
    with TestClient(build_app(FakeBackend(), ServerConfig(api_keys=("k1",)))) as c:
        for method, path in INTERNAL:
            assert call(c, method, path, {"authorization": "Bearer k1"}).status_code == 403
            assert call(c, method, path).status_code == 401
            assert call(c, method, path, {"x-tandem-cluster-secret": ""}).status_code == 401


def test_a_secret_without_keys_guards_only_internal_routes():
    with TestClient(build_app(FakeBackend(), ServerConfig(cluster_secret=SECRET))) as c:
        assert c.post("/v1/chat/completions", json=BODY).status_code == 200
        assert c.get("/internal/stats").status_code == 401
        assert c.get("/internal/stats", headers={"authorization": "Bearer k1"}).status_code == 401
        assert c.get("/internal/stats", headers={"x-tandem-cluster-secret": SECRET}).status_code == 200


def test_nothing_configured_leaves_everything_open():
    with TestClient(build_app(FakeBackend(), ServerConfig())) as c:
        assert c.get("/internal/stats").status_code == 200
        assert c.post("/v1/chat/completions", json=BODY).status_code == 200


def test_internal_paths_are_recognised_however_written():
    for path in ("/internal", "/internal/", "/internal/drain", "//internal/drain", "/internal/role/x"):
        assert is_internal(path), path
    for path in ("/internals", "/v1/internal/x", "/health", "/"):
        assert not is_internal(path), path


def test_the_secret_stays_out_of_the_config_repr():
    assert SECRET not in repr(ServerConfig(cluster_secret=SECRET))
