from starlette.testclient import TestClient

from tests.api.fakes import FakeBackend
from tandem.api.app import build_app
from tandem.api.config import ServerConfig

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_cors_preflight_passes_before_authentication():
    app = build_app(FakeBackend(), ServerConfig(api_keys=("k1",), allowed_origins=("https://ui.example",)))
    preflight = {"origin": "https://ui.example", "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization,content-type"}
    with TestClient(app) as c:
        r = c.options("/v1/chat/completions", headers=preflight)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ui.example"
        r = c.post("/v1/chat/completions", json=BODY,
                   headers={"origin": "https://ui.example", "authorization": "Bearer k1"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ui.example"
        r = c.options("/v1/chat/completions", headers={**preflight, "origin": "https://evil.example"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    with TestClient(build_app(FakeBackend(), ServerConfig())) as c:  # default: any origin, as vLLM
        r = c.get("/v1/models", headers={"origin": "http://localhost:3000"})
        assert r.headers["access-control-allow-origin"] == "*"
    with TestClient(build_app(FakeBackend(), ServerConfig(allowed_origins=()))) as c:
        r = c.get("/v1/models", headers={"origin": "http://localhost:3000"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_health_only_after_startup_and_hooks_run():
    calls = []

    async def start():
        calls.append("start")

    async def stop():
        calls.append("stop")

    app = build_app(FakeBackend(), ServerConfig(), startup=start, shutdown=stop)
    plain = TestClient(app)  # no `with`: the lifespan has not run
    assert plain.get("/health").status_code == 503
    with TestClient(app) as c:
        assert c.get("/health").json() == {"status": "ok"}
        assert calls == ["start"]
    assert calls == ["start", "stop"]


def test_unknown_route_is_json_404(client):
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"
    r = client.get("/v1/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_served_model_name_overrides_backend_name():
    with TestClient(build_app(FakeBackend(), ServerConfig(served_model_name="alias"))) as c:
        assert c.post("/v1/chat/completions", json=BODY).status_code == 404
        assert c.post("/v1/chat/completions", json={**BODY, "model": "alias"}).status_code == 200
        assert c.get("/v1/models").json()["data"][0]["id"] == "alias"


def test_version_names_the_installed_package(client):
    import importlib.metadata
    assert client.get("/version").json() == {"version": importlib.metadata.version("tandem")}
