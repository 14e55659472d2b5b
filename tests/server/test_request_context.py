"""The RequestContext a route builds: header, body fields and API key reach the backend."""

from tandem.types import RequestContext

MSG = [{"role": "user", "content": "hi"}]
WAI = "/client/v4/accounts/a/ai/run/@cf/meta/fake-model"


def chat(client, headers=None, **kw):
    return client.post("/v1/chat/completions", headers=headers,
                       json={"model": "fake-model", "messages": MSG, "max_tokens": 2, **kw})


def test_a_request_without_header_or_fields_has_an_empty_context(client, backend):
    assert chat(client).status_code == 200
    assert backend.seen[-1].context == RequestContext()


def test_session_header_is_trimmed_and_bounded(client, backend):
    chat(client, headers={"x-session-affinity": "  agent-7  "})
    assert backend.seen[-1].context.session_id == "agent-7"
    chat(client, headers={"x-session-affinity": "s" * 300})
    assert backend.seen[-1].context.session_id == "s" * 256
    chat(client, headers={"x-session-affinity": "   "})
    assert backend.seen[-1].context.session_id is None


def test_cache_salt_and_priority_reach_every_engine_request(client, backend):
    r = client.post("/v1/completions", headers={"x-session-affinity": "s1"},
                    json={"model": "fake-model", "prompt": ["a", "b"], "n": 2, "max_tokens": 2,
                          "cache_salt": "tenant-a", "priority": -5})
    assert r.status_code == 200
    want = RequestContext(session_id="s1", cache_salt="tenant-a", priority=-5)
    assert [q.context for q in backend.seen] == [want] * 4
    assert all(q.cache_salt == "tenant-a" for q in backend.seen)


def test_priority_must_be_an_integer(client, backend):
    r = chat(client, priority="high")
    assert r.status_code == 400 and r.json()["error"]["param"] == "priority"
    assert backend.seen == []


def test_workers_ai_route_carries_the_session(client, backend):
    r = client.post(WAI, headers={"x-session-affinity": "s2"}, json={"prompt": "x", "max_tokens": 2})
    assert r.status_code == 200
    assert backend.seen[-1].context == RequestContext(session_id="s2")
