"""Accounts and tokens over HTTP, in one in-process app (fake backend, real SQLite queue and account
store): the admin API, each API's routes with an account's token, and every refusal in the shape
of the API that was called (tandem/api/auth.py, tandem/api/scopes.py, tandem/api/admin/admin_api.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.testclient import TestClient

from tandem import cluster_secret
from tandem.accounts.open_store import open_account_store
from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig, QueueSetup
from tests.asyncq.receiver import Receiver
from tests.asyncq.servers import free_port
from tests.api.fakes import FakeBackend
from tests.api.tenancy_checks import check_every_route_is_owned

SECRET = "accounts-test-cluster-secret"
CLUSTER = cluster_secret.headers(SECRET)
API_KEY = "plain-api-key"
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
MESSAGES = {"model": "fake-model", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
WAI = {"prompt": "hi", "max_tokens": 2}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def wai_run(account: str, queued: bool = False) -> str:
    return f"/client/v4/accounts/{account}/ai/run/@cf/test/fake-model" + ("?queueRequest=true" if queued else "")


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(reply="Hi")


def make_app(backend, tmp_path, ttl_s: float = 5.0):
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05), headroom=lambda: True)
    config = ServerConfig(accounts=True, cluster_secret=SECRET, api_keys=(API_KEY,),
                          token_cache_ttl_s=ttl_s)
    return build_app(backend, config, queue=setup)


@pytest.fixture
def client(backend, tmp_path):
    with TestClient(make_app(backend, tmp_path)) as c:
        yield c


def new_account(c, account_id: str, name: str = "team") -> dict:
    r = c.post("/admin/accounts", headers=CLUSTER, json={"name": name, "id": account_id})
    assert r.status_code == 200, r.text
    return r.json()


def new_token(c, account_id: str, scopes=("ai:run", "ai:batch"), **extra) -> str:
    r = c.post(f"/admin/accounts/{account_id}/tokens", headers=CLUSTER,
               json={"name": "t", "scopes": list(scopes), **extra})
    assert r.status_code == 200, r.text
    return r.json()["token"]


# --- the admin API ---------------------------------------------------------------------------

def test_admin_api_manages_accounts_and_tokens(client):
    # the cluster secret bootstraps the first operator
    acc = new_account(client, "ops", "Operators")
    assert acc == {"object": "account", "id": "ops", "name": "Operators", "created_at": acc["created_at"],
                   "disabled": False, "disabled_at": None}
    r = client.post("/admin/accounts/ops/tokens", headers=CLUSTER,
                    json={"name": "root", "scopes": ["admin"], "expires_in": 3600})
    assert r.status_code == 200, r.text
    created = r.json()
    op = bearer(created["token"])
    assert created["token"].startswith(f"tdm_{created['id']}_")
    assert created["scopes"] == ["admin"] and created["status"] == "active"
    assert created["expires_at"] - created["created_at"] in (3599, 3600, 3601)
    # the operator's token does the rest
    r = client.post("/admin/accounts", headers=op, json={"name": "Team A"})
    assert r.status_code == 200 and len(r.json()["id"]) == 32
    team = r.json()["id"]
    assert [a["id"] for a in client.get("/admin/accounts", headers=op).json()["data"]] == ["ops", team]
    assert client.get(f"/admin/accounts/{team}", headers=op).json()["name"] == "Team A"
    r = client.post(f"/admin/accounts/{team}/tokens", headers=op, json={"name": "ci"})
    assert r.json()["scopes"] == ["ai:run", "ai:batch"]        # the default scopes
    token_id = r.json()["id"]
    listed = client.get(f"/admin/accounts/{team}/tokens", headers=op).json()["data"]
    assert [t["id"] for t in listed] == [token_id] and "token" not in listed[0]   # shown once only
    r = client.delete(f"/admin/accounts/{team}/tokens/{token_id}", headers=op)
    assert r.status_code == 200 and r.json()["status"] == "revoked" and r.json()["revoked_at"]
    r = client.post(f"/admin/accounts/{team}/disable", headers=op)
    assert r.json()["disabled"] is True
    assert client.post(f"/admin/accounts/{team}/enable", headers=op).json()["disabled"] is False


@pytest.mark.parametrize("method,path,body,status,param", [
    ("POST", "/admin/accounts", {"name": "x", "id": "ops"}, 409, "id"),
    ("POST", "/admin/accounts", {"name": "x", "id": "key-0"}, 400, "id"),
    ("POST", "/admin/accounts", {"id": "new"}, 400, "name"),
    ("POST", "/admin/accounts", {"name": "x", "scopes": ["admin"]}, 400, "scopes"),
    ("GET", "/admin/accounts/nobody", None, 404, "account_id"),
    ("POST", "/admin/accounts/nobody/disable", None, 404, "account_id"),
    ("POST", "/admin/accounts/nobody/tokens", {"name": "t"}, 404, "account_id"),
    ("GET", "/admin/accounts/nobody/tokens", None, 404, "account_id"),
    ("DELETE", "/admin/accounts/ops/tokens/0123456789abcdef", None, 404, "token_id"),
    ("POST", "/admin/accounts/ops/tokens", {"name": "t", "scopes": ["root"]}, 400, "scopes"),
    ("POST", "/admin/accounts/ops/tokens", {"name": "t", "scopes": "ai:run"}, 400, "scopes"),
    ("POST", "/admin/accounts/ops/tokens", {"name": "t", "expires_in": -1}, 400, "expires_in"),
    ("POST", "/admin/accounts/ops/tokens", {"name": ""}, 400, "name"),
])
def test_admin_api_bad_input(client, method, path, body, status, param):
    new_account(client, "ops")
    r = client.request(method, path, headers=CLUSTER, json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_admin_api_bad_json(client):
    r = client.post("/admin/accounts", headers={**CLUSTER, "content-type": "application/json"},
                    content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_revoking_another_accounts_token_is_404_and_changes_nothing(client):
    new_account(client, "acc-a")
    new_account(client, "acc-b")
    token = new_token(client, "acc-a")
    token_id = token.split("_")[1]
    r = client.delete(f"/admin/accounts/acc-b/tokens/{token_id}", headers=CLUSTER)
    unknown = client.delete("/admin/accounts/acc-b/tokens/0000000000000000", headers=CLUSTER)
    assert r.status_code == 404 == unknown.status_code
    assert r.text.replace(token_id, "0000000000000000") == unknown.text
    assert client.post("/v1/chat/completions", headers=bearer(token), json=CHAT).status_code == 200


# --- who opens /admin and /internal ------------------------------------------------------------

def test_only_an_operator_or_the_cluster_opens_admin(client):
    new_account(client, "acc-a")
    tenant = new_token(client, "acc-a", scopes=("ai:run", "ai:batch"))
    for headers, status in (({}, 401), (bearer("tdm_nope"), 401), (bearer(tenant), 403),
                            (bearer(API_KEY), 403), ({"x-api-key": tenant}, 403),
                            ({cluster_secret.HEADER: "wrong"}, 401), (CLUSTER, 200),
                            (bearer(SECRET), 200)):
        r = client.get("/admin/accounts", headers=headers)
        assert r.status_code == status, (headers, r.text)
        if status == 403:
            assert r.json()["error"]["code"] == "permission_denied"
            assert "admin scope" in r.json()["error"]["message"]
    operator = new_token(client, "acc-a", scopes=("admin",))
    assert client.get("/admin/accounts", headers=bearer(operator)).status_code == 200
    # an operator's token without ai:run is no tenant token
    assert client.post("/v1/chat/completions", headers=bearer(operator), json=CHAT).status_code == 403


def test_account_tokens_never_open_internal(client):
    new_account(client, "acc-a")
    for scopes in (("ai:run", "ai:batch"), ("admin",)):
        token = new_token(client, "acc-a", scopes=scopes)
        r = client.get("/internal/stats", headers=bearer(token))
        assert r.status_code == 403 and "cluster secret" in r.json()["error"]["message"]
    assert client.get("/internal/stats", headers=bearer("tdm_0000000000000000_" + "x" * 43)).status_code == 401
    assert client.get("/internal/stats", headers=CLUSTER).status_code == 200


def test_without_keys_or_secret_accounts_still_close_internal(backend, tmp_path):
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "q.db")), headroom=lambda: True)
    with TestClient(build_app(backend, ServerConfig(accounts=True), queue=setup)) as c:
        assert c.get("/internal/stats").status_code == 401
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 401
        assert c.get("/admin/accounts").status_code == 401
        assert c.get("/health").status_code == 200


def test_accounts_need_the_queue(backend):
    with pytest.raises(ValueError, match="queue's database"):
        build_app(backend, ServerConfig(accounts=True))


# --- an account's token on every API ---------------------------------------------------------

def test_a_token_runs_openai_anthropic_and_workers_ai_as_its_account(client, backend):
    new_account(client, "acc-a")
    token = new_token(client, "acc-a", scopes=("ai:run",))
    assert client.post("/v1/chat/completions", headers=bearer(token), json=CHAT).status_code == 200
    r = client.post("/v1/messages", headers={"x-api-key": token, "anthropic-version": "2023-06-01"},
                    json=MESSAGES)
    assert r.status_code == 200, r.text
    r = client.post(wai_run("acc-a"), headers=bearer(token), json=WAI)
    assert r.status_code == 200 and r.json()["success"] is True
    assert client.get("/v1/models", headers=bearer(token)).status_code == 200   # no scope needed
    # the account is the tenant: ownership and the KV partition follow it
    assert [q.context.tenant for q in backend.seen] == ["acc-a"] * 3
    # --api-key keeps working as before, its tenant "key-0", any account in Workers AI paths
    assert client.post(wai_run("whatever"), headers=bearer(API_KEY), json=WAI).status_code == 200
    assert backend.seen[-1].context.tenant == "key-0"


def test_workers_ai_path_of_another_account_is_403_in_cloudflares_shape(client):
    new_account(client, "acc-a")
    new_account(client, "acc-b")
    token = new_token(client, "acc-a")
    for method, path, body in (("POST", wai_run("acc-b"), WAI), ("POST", wai_run("acc-b", True),
                                                                 {"requests": [WAI]}),
                               ("POST", wai_run("no-such-account"), WAI),
                               ("GET", "/client/v4/accounts/acc-b/event_subscriptions/subscriptions", None),
                               ("GET", "/client/v4/accounts/acc-b/ai/batches/x/events", None)):
        r = client.request(method, path, headers=bearer(token), json=body)
        assert r.status_code == 403, (path, r.text)
        assert r.json()["success"] is False and r.json()["result"] is None
        assert r.json()["errors"][0]["code"] == 10000
        assert "Authentication error" in r.json()["errors"][0]["message"]
    # the same answer whether the other account exists or not
    a = client.post(wai_run("acc-b"), headers=bearer(token), json=WAI)
    b = client.post(wai_run("acc-zz"), headers=bearer(token), json=WAI)
    assert a.text.replace("acc-b", "acc-zz") == b.text


def _refusals(c, token: str) -> list[tuple[int, object]]:
    """(status, the error's identifying field) for one token on each API's run route."""
    out = []
    r = c.post("/v1/chat/completions", headers=bearer(token), json=CHAT)
    out.append((r.status_code, r.json()["error"]["code"]))
    r = c.post("/v1/messages", headers={"x-api-key": token}, json=MESSAGES)
    assert r.json()["type"] == "error"
    out.append((r.status_code, r.json()["error"]["type"]))
    r = c.post(wai_run("acc-a"), headers=bearer(token), json=WAI)
    assert r.json()["success"] is False and r.json()["errors"]
    out.append((r.status_code, r.json()["errors"][0]["code"]))
    return out


UNAUTHORIZED = [(401, "invalid_api_key"), (401, "authentication_error"), (401, 10000)]
FORBIDDEN = [(403, "permission_denied"), (403, "permission_error"), (403, 10000)]


def test_refusals_in_the_shape_of_each_api(client):
    new_account(client, "acc-a")
    revoked = new_token(client, "acc-a")
    client.delete(f"/admin/accounts/acc-a/tokens/{revoked.split('_')[1]}", headers=CLUSTER)
    expiring = new_token(client, "acc-a", expires_in=0.5)
    batch_only = new_token(client, "acc-a", scopes=("ai:batch",))
    unknown = "tdm_0123456789abcdef_" + "A" * 43
    assert _refusals(client, revoked) == UNAUTHORIZED
    assert _refusals(client, unknown) == UNAUTHORIZED
    assert _refusals(client, "garbage") == UNAUTHORIZED
    assert _refusals(client, batch_only) == FORBIDDEN
    time.sleep(0.6)
    assert _refusals(client, expiring) == UNAUTHORIZED
    r = client.post("/v1/chat/completions", headers=bearer(revoked), json=CHAT)
    assert "revoked" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", headers=bearer(expiring), json=CHAT)
    assert "expired at" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", headers=bearer(batch_only), json=CHAT)
    assert "lacks the scope 'ai:run'" in r.json()["error"]["message"]


def test_scopes_per_route_group(client):
    new_account(client, "acc-a")
    run_only = bearer(new_token(client, "acc-a", scopes=("ai:run",)))
    batch_only = bearer(new_token(client, "acc-a", scopes=("ai:batch",)))
    batch_routes = [("GET", "/v1/files", None), ("GET", "/v1/batches", None),
                    ("POST", wai_run("acc-a", True), {"requests": [WAI]}),
                    ("GET", "/client/v4/accounts/acc-a/event_subscriptions/subscriptions", None)]
    run_routes = [("POST", "/v1/chat/completions", CHAT), ("POST", "/v1/completions",
                                                           {"model": "fake-model", "prompt": "x", "max_tokens": 2}),
                  ("POST", "/v1/responses", {"model": "fake-model", "input": "x", "max_output_tokens": 2}),
                  ("GET", "/v1/responses/resp_x", None), ("POST", wai_run("acc-a"), WAI)]
    for method, path, body in batch_routes:
        assert client.request(method, path, headers=run_only, json=body).status_code == 403, path
        assert client.request(method, path, headers=batch_only, json=body).status_code == 200, path
    for method, path, body in run_routes:
        assert client.request(method, path, headers=batch_only, json=body).status_code == 403, path
        assert client.request(method, path, headers=run_only, json=body).status_code in (200, 404), path


def test_disabling_an_account_fails_all_its_tokens_until_enabled(client):
    new_account(client, "acc-a")
    new_account(client, "acc-b")
    a1, a2, b = new_token(client, "acc-a"), new_token(client, "acc-a"), new_token(client, "acc-b")
    for t in (a1, a2, b):
        assert client.post("/v1/chat/completions", headers=bearer(t), json=CHAT).status_code == 200
    client.post("/admin/accounts/acc-a/disable", headers=CLUSTER)     # at once on this server
    for t in (a1, a2):
        r = client.post("/v1/chat/completions", headers=bearer(t), json=CHAT)
        assert r.status_code == 401 and "disabled" in r.json()["error"]["message"]
    assert client.post("/v1/chat/completions", headers=bearer(b), json=CHAT).status_code == 200
    client.post("/admin/accounts/acc-a/enable", headers=CLUSTER)
    assert client.post("/v1/chat/completions", headers=bearer(a1), json=CHAT).status_code == 200


def test_a_revocation_elsewhere_takes_effect_within_the_ttl(backend, tmp_path):
    """Another gateway or the CLI revokes in the shared database: this app notices once its cached
    lookup is older than token_cache_ttl_s."""
    with TestClient(make_app(backend, tmp_path, ttl_s=0.3)) as c:
        new_account(c, "acc-a")
        token = new_token(c, "acc-a")
        assert c.post("/v1/chat/completions", headers=bearer(token), json=CHAT).status_code == 200

        async def revoke():
            store = open_account_store(str(tmp_path / "queue.db"))
            try:
                await store.revoke_token("acc-a", token.split("_")[1])
            finally:
                await store.close()
        asyncio.run(revoke())
        revoked_at = time.monotonic()
        while c.post("/v1/chat/completions", headers=bearer(token), json=CHAT).status_code == 200:
            assert time.monotonic() - revoked_at < 0.3 + 0.5
            time.sleep(0.05)
        r = c.post("/v1/chat/completions", headers=bearer(token), json=CHAT)
        assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]


def test_two_accounts_never_see_each_others_objects(backend, tmp_path):
    """tests/api/tenancy_checks.py with two accounts' tokens: each names its own account in
    Workers AI paths, and every id of the other's answers as an unknown one."""
    hook_a, hook_b = Receiver(free_port(), status=200), Receiver(free_port(), status=200)
    hook_a.start()
    hook_b.start()
    try:
        with TestClient(make_app(backend, tmp_path)) as c:
            new_account(c, "acc-a")
            new_account(c, "acc-b")
            a, b = bearer(new_token(c, "acc-a")), bearer(new_token(c, "acc-b"))
            check_every_route_is_owned(c, a, b, "fake-model", f"http://127.0.0.1:{hook_a.port}/a",
                                       f"http://127.0.0.1:{hook_b.port}/b", timeout_s=20,
                                       accounts=("acc-a", "acc-b"))
        assert {q.context.tenant for q in backend.seen} == {"acc-a", "acc-b"}
    finally:
        hook_a.stop()
        hook_b.stop()


# --- the usage routes under accounts ---------------------------------------------------------

def test_usage_routes_take_an_operator_token_or_the_account_itself(client):
    new_account(client, "ops")
    new_account(client, "team-a")
    new_account(client, "team-b")
    operator = new_token(client, "ops", scopes=("admin",))
    tenant = new_token(client, "team-a")
    assert client.get("/admin/usage", headers=bearer(operator)).status_code == 200
    assert client.get("/admin/usage", headers=CLUSTER).status_code == 200
    assert client.get("/admin/usage", headers=bearer(tenant)).status_code == 403
    assert client.get("/admin/usage").status_code == 401
    own = client.get("/client/v4/accounts/team-a/ai/usage", headers=bearer(tenant))
    assert own.status_code == 200, own.text
    other = client.get("/client/v4/accounts/team-b/ai/usage", headers=bearer(tenant))
    unknown = client.get("/client/v4/accounts/no-such/ai/usage", headers=bearer(tenant))
    # another account's ledger: refused the same way whether that account exists or not
    assert other.status_code == unknown.status_code == 403
    assert other.text.replace("team-b", "X") == unknown.text.replace("no-such", "X")   # it echoes the id only
