"""The gateway app end to end over in-process fake workers (no sockets): routes, headers, errors."""

import json

import pytest
from starlette.testclient import TestClient

from tandem.api.disconnect import DisconnectGuard
from tandem.api.queue.service import QueueConfig
from tandem.gateway.app import build_gateway_app, model_facts
from tandem.gateway.config import GatewayConfig, RegistryConfig
from tandem.testing.tiny_model import write_test_model
from tandem.types import RequestContext
from tests.gateway.fake_workers import FakeCluster, greedy, worker_http

P0, D0, B0 = "http://127.0.0.1:9100", "http://127.0.0.1:9200", "http://127.0.0.1:9300"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(write_test_model(tmp_path_factory.mktemp("m") / "tiny", vocab_size=512))


def client_for(model_dir, roles, max_model_len=None, **cfg):
    cluster = FakeCluster(roles)
    cluster.max_model_len.update(max_model_len or {})
    config = GatewayConfig(prefill=tuple(u for u, r in roles.items() if r == "prefill"),
                           decode=tuple(u for u, r in roles.items() if r == "decode"),
                           workers=tuple(u for u, r in roles.items() if r == "both"),
                           model_path=model_dir, served_model_name="tiny",
                           registry=RegistryConfig(poll_interval_s=30), **cfg)
    tok, name, max_len = model_facts(model_dir, config.served_model_name)
    app = build_gateway_app(config, tok, name, max_len, worker_http=worker_http(cluster))
    return cluster, TestClient(app)


def test_completion_through_prefill_and_decode(model_dir):
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"})
    with c:
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "hello there", "max_tokens": 6,
                                            "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.headers["x-tandem-prefill"] == P0 and r.headers["x-tandem-decode"] == D0
        body = r.json()
        prompt_ids = c.app.state.ctx.backend.tokenizer.encode("hello there")
        want = greedy(prompt_ids, 6)
        assert body["choices"][0]["text"] == "".join(f"<{t}>" for t in want)
        assert body["usage"]["prompt_tokens"] == len(prompt_ids)
        assert body["usage"]["completion_tokens"] == len(want)
        assert [x[0] for x in cluster.calls] == [P0, D0]
        m = c.get("/metrics").text
        assert 'tandem:gateway_routing_decisions_total{policy="default",pool="prefill",reason="load"} 1.0' in m
        assert "tandem:time_to_first_token_seconds_count" in m
        assert "tandem:gateway_inflight_prefill_tokens" in m


def test_streaming_chat_has_headers_and_session_reaches_policy(model_dir):
    cluster, c = client_for(model_dir, {B0: "both"}, policy="affinity")
    with c:
        with c.stream("POST", "/v1/chat/completions", headers={"x-session-affinity": "abc"},
                      json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 5, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}) as r:
            assert r.status_code == 200
            assert r.headers["x-tandem-decode"] == B0
            lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        usage = json.loads(lines[-2][6:])["usage"]
        assert usage["completion_tokens"] == 5
        m = c.get("/metrics").text
        assert 'policy="affinity",pool="both",reason="affinity"' in m


def test_session_salt_and_priority_reach_the_workers_through_the_wire(model_dir):
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"})
    with c:
        r = c.post("/v1/completions", headers={"x-session-affinity": " s9 "},
                   json={"model": "tiny", "prompt": "hello", "max_tokens": 3, "cache_salt": "tenant-a",
                         "priority": 4})
        assert r.status_code == 200, r.text
        want = RequestContext(session_id="s9", cache_salt="tenant-a", priority=4)
        assert [q.context for q in cluster.requests] == [want, want]
        assert c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2}
                      ).status_code == 200
        assert cluster.requests[-1].context.session_id is None


def test_a_conversation_without_the_header_reaches_the_workers_under_its_fingerprint(model_dir):
    """The workers key KV retention by the session: the gateway sends the conversation's
    fingerprint as its session id when the client sent no x-session-affinity."""
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"})
    with c:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert c.post("/v1/chat/completions", json=body).status_code == 200
        first = {q.context.session_id for q in cluster.requests}
        assert len(first) == 1 and next(iter(first)).startswith("conv-")
        turn2 = {**body, "messages": [*body["messages"], {"role": "assistant", "content": "yo"},
                                      {"role": "user", "content": "again"}]}
        assert c.post("/v1/chat/completions", json=turn2).status_code == 200
        assert cluster.requests[-1].context.session_id == next(iter(first))


def test_context_is_the_smallest_a_worker_reports(model_dir):
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"}, max_model_len={P0: 96, D0: 64})
    with c:
        assert c.get("/v1/models").json()["data"][0]["max_model_len"] == 64
        prompt = list(range(5, 5 + 70))  # fits the model's context, not the workers'
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert "maximum context length is 64 tokens" in r.json()["error"]["message"]
        assert cluster.calls == []
        r = c.post("/tokenize", json={"prompt": "hi"})
        assert r.json()["max_model_len"] == 64


def test_no_worker_is_503_with_retry_after(model_dir):
    cluster, c = client_for(model_dir, {B0: "both"})
    cluster.dead.add(B0)
    with c:
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "no_healthy_worker"
        r = c.post("/client/v4/accounts/a/ai/run/@cf/x/tiny", json={"prompt": "x"})
        assert r.status_code == 503 and r.json()["success"] is False
        assert c.get("/health").status_code == 503  # a load balancer must not send traffic here


def test_health_is_ready_while_one_pool_can_serve(model_dir):
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"})
    with c:
        r = c.get("/health")
        assert r.status_code == 200 and r.json()["mode"] == "pd"
        assert r.json()["pools"] == {"prefill": {"healthy": 1, "draining": 0, "total": 1},
                                     "decode": {"healthy": 1, "draining": 0, "total": 1}}
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"})
    cluster.dead.add(D0)
    with c:   # the prefill worker serves whole requests: the gateway can serve, so it is ready
        r = c.get("/health")
        assert r.status_code == 200 and r.json()["mode"] == "prefill"
        assert r.json()["pools"]["decode"] == {"healthy": 0, "draining": 0, "total": 1}
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"})
    cluster.dead.update((P0, D0))
    with c:   # nothing can serve: 503 naming the pools, liveness still 200
        r = c.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "no healthy worker"
        assert "prefill (0/1 healthy, 0 draining)" in r.json()["reason"]
        assert "decode (0/1 healthy, 0 draining)" in r.json()["reason"]
        assert c.get("/livez").json() == {"status": "alive"}


def test_health_503_while_a_pool_drains_and_the_other_is_dead(model_dir):
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"})
    cluster.dead.add(P0)
    with c:
        assert c.post("/internal/drain", json={"url": D0}).json()["ok"]
        r = c.get("/health")
        assert r.status_code == 503
        assert r.json()["pools"]["decode"] == {"healthy": 0, "draining": 1, "total": 1}
        assert "decode (0/1 healthy, 1 draining)" in r.json()["reason"]


def test_registration_drain_and_workers_listing(model_dir):
    cluster, c = client_for(model_dir, {})
    cluster.roles[D0] = "decode"
    cluster.roles[P0] = "prefill"
    with c:
        assert c.post("/internal/register", json={"url": P0, "role": "prefill"}).json()["ok"]
        assert c.post("/internal/register", json={"url": D0, "role": "decode"}).json()["ok"]
        assert c.post("/internal/register", json={"url": D0, "role": "mixed"}).status_code == 400
        ws = {w["url"]: w for w in c.get("/internal/workers").json()["workers"]}
        assert set(ws) == {P0, D0}
        # registration triggers a poll; wait for it through one explicit round
        c.portal.call(c.app.state.monitor.poll_once)
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 3,
                                            "temperature": 0})
        assert r.status_code == 200 and r.headers["x-tandem-decode"] == D0
        assert c.post("/internal/drain", json={"url": D0}).json()["ok"]
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 3})
        assert r.status_code == 503 and "decode" in r.json()["error"]["message"]
        assert c.post("/internal/deregister", json={"url": D0}).json()["ok"]
        assert [w["url"] for w in c.get("/internal/workers").json()["workers"]] == [P0]


def test_saturated_is_429_without_the_fair_queue(model_dir):
    from tandem.gateway.admission.fair_queue import FairQueueConfig
    from tandem.router.admission import AdmissionLimits
    cluster, c = client_for(model_dir, {B0: "both"}, admission=AdmissionLimits(max_waiting=0),
                            fair_queue=FairQueueConfig(enabled=False))
    with c:
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"


def test_saturated_waits_in_the_fair_queue_then_503_past_its_bound(model_dir):
    from tandem.gateway.admission.fair_queue import FairQueueConfig
    from tandem.router.admission import AdmissionLimits
    cluster, c = client_for(model_dir, {B0: "both"}, admission=AdmissionLimits(max_waiting=0),
                            fair_queue=FairQueueConfig(max_wait_s=0.3))
    with c:
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "queue_timeout" and int(r.headers["retry-after"]) >= 1
        assert "every worker at capacity" in r.json()["error"]["message"]
        text = c.get("/metrics").text
        assert 'tandem:gateway_queue_rejected_total{reason="timeout",tenant=""} 1.0' in text
        assert "tandem:gateway_queue_depth{tenant=\"\"} 0.0" in text, [ln for ln in text.splitlines() if "queue" in ln]


def test_one_disconnect_guard(model_dir):
    """build_app installs the DisconnectGuard; the gateway adds none of its own."""
    _, c = client_for(model_dir, {B0: "both"})
    assert [m.cls for m in c.app.user_middleware].count(DisconnectGuard) == 1


def test_management_routes_take_the_cluster_secret_never_a_tenant_key(model_dir):
    """Issue #30: tenant B drained the only worker and registered its own with B's key."""
    cluster, c = client_for(model_dir, {B0: "both"}, api_keys=("key-a", "key-b"), cluster_secret="cs")
    secret = {"x-tandem-cluster-secret": "cs"}
    calls = [("POST", "/internal/drain", {"url": B0}),
             ("POST", "/internal/register", {"url": "http://127.0.0.1:9999", "role": "both"}),
             ("POST", "/internal/deregister", {"url": B0}),
             ("GET", "/internal/workers", None), ("GET", "/internal/planner", None)]
    with c:
        for method, path, body in calls:
            r = c.request(method, path, json=body, headers={"authorization": "Bearer key-b"})
            assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", path
            assert c.request(method, path, json=body).status_code == 401, path
        workers = c.get("/internal/workers", headers=secret).json()["workers"]
        assert [(w["url"], w["draining"]) for w in workers] == [(B0, False)]
        r = c.post("/v1/completions", headers={"authorization": "Bearer key-a"},
                   json={"model": "tiny", "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200 and r.headers["x-tandem-decode"] == B0
        assert c.post("/internal/drain", json={"url": B0}, headers=secret).json() == {"ok": True}


def test_accounts_on_the_gateway(model_dir, tmp_path):
    """--accounts: the admin API on the gateway, an account's token on its routes; the account is
    the tenant the workers get over the internal wire (the KV partition follows it)."""
    cluster, c = client_for(model_dir, {P0: "prefill", D0: "decode"}, cluster_secret="cs",
                            accounts=True, queue=QueueConfig(target=str(tmp_path / "q.db")))
    secret = {"x-tandem-cluster-secret": "cs"}
    with c:
        assert c.post("/admin/accounts", headers=secret, json={"name": "A", "id": "acc-a"}).status_code == 200
        r = c.post("/admin/accounts/acc-a/tokens", headers=secret, json={"name": "t", "scopes": ["ai:run"]})
        auth = {"authorization": f"Bearer {r.json()['token']}"}
        r = c.post("/v1/completions", headers=auth, json={"model": "tiny", "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert {q.context.tenant for q in cluster.requests} == {"acc-a"}
        r = c.post("/client/v4/accounts/acc-b/ai/run/@cf/x/tiny", headers=auth, json={"prompt": "hi"})
        assert r.status_code == 403 and r.json()["errors"][0]["code"] == 10000
        assert c.get("/admin/accounts", headers=auth).status_code == 403
        assert c.get("/internal/workers", headers=auth).status_code == 403
        assert c.post("/v1/completions", json={"model": "tiny", "prompt": "hi"}).status_code == 401
