"""The RequestContext a route builds: header, body fields and API key reach the backend."""

from dataclasses import replace

from tandem.types import RequestContext

MSG = [{"role": "user", "content": "hi"}]
WAI = "/client/v4/accounts/a/ai/run/@cf/meta/fake-model"


def chat(client, headers=None, **kw):
    return client.post("/v1/chat/completions", headers=headers,
                       json={"model": "fake-model", "messages": MSG, "max_tokens": 2, **kw})


def test_a_request_without_header_or_fields_has_an_empty_context(client, backend):
    assert chat(client).status_code == 200
    ctx = backend.seen[-1].context
    # but for the request's own span, a new trace (tests/api/test_tracing.py)
    assert ctx.trace is not None and replace(ctx, trace=None) == RequestContext()


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
    assert [replace(q.context, trace=None) for q in backend.seen] == [want] * 4
    assert all(q.cache_salt == "tenant-a" for q in backend.seen)


def test_priority_must_be_an_integer(client, backend):
    r = chat(client, priority="high")
    assert r.status_code == 400 and r.json()["error"]["param"] == "priority"
    assert backend.seen == []


ROUTES = {"chat": ("/v1/chat/completions", {"messages": MSG, "max_tokens": 2}),
          "completions": ("/v1/completions", {"prompt": "a", "max_tokens": 2}),
          "responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 2})}


def test_priority_on_every_openai_route_is_an_integer_or_a_400_naming_it(client, backend):
    """Any integer (vLLM's meaning, lower first; 3.0 counts as 3, as for every integer field);
    a boolean, a fraction, a string, a list or an object is refused naming `priority`."""
    for route, (path, body) in ROUTES.items():
        for bad in (True, False, 2.5, "high", "3", [1], {"level": 1}):
            r = client.post(path, json={"model": "fake-model", **body, "priority": bad})
            assert r.status_code == 400, (route, bad)
            error = r.json()["error"]
            assert error["param"] == "priority" and "must be an integer" in error["message"]
        assert backend.seen == [], route
        for good, want in ((-7, -7), (3.0, 3), (10**15, 10**15), (None, 0)):
            r = client.post(path, json={"model": "fake-model", **body, "priority": good})
            assert r.status_code == 200, (route, good)
            assert backend.seen[-1].context.priority == want, (route, good)
        backend.seen.clear()


def test_messages_and_workers_ai_have_no_priority_field(client, backend):
    """Neither API has the field: a `priority` in their bodies is ignored as any unknown field, and
    their requests run at 0."""
    r = client.post("/v1/messages", json={"model": "fake-model", "max_tokens": 2, "messages": MSG, "priority": -5})
    assert r.status_code == 200 and backend.seen[-1].context.priority == 0
    r = client.post(WAI, json={"prompt": "x", "max_tokens": 2, "priority": "high"})
    assert r.status_code == 200 and backend.seen[-1].context.priority == 0


def test_workers_ai_route_carries_the_session(client, backend):
    r = client.post(WAI, headers={"x-session-affinity": "s2"}, json={"prompt": "x", "max_tokens": 2})
    assert r.status_code == 200
    assert replace(backend.seen[-1].context, trace=None) == RequestContext(session_id="s2")
