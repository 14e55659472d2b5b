"""The agent hint (tandem/turn/agent_hint.py): `agent.expect_next_turn_s` in the body of every
generation route, or the header `x-agent-expect-next-turn-s`, reaches the engine request's context
(clamped past the cap); a value that is not a number, negative or not finite is a 400 naming the
field. With tools and a tool-call parser the context also carries the format's call markers."""

from dataclasses import replace

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.internal.wire import request_from_dict, request_to_dict
from tandem.turn.agent_hint import HEADER, MAX_EXPECT_NEXT_TURN_S
from tandem.types import AgentTurn
from tests.api.fakes import ByteTokenizer, FakeBackend

MSG = [{"role": "user", "content": "hi"}]
ROUTES = {"chat": ("/v1/chat/completions", {"messages": MSG, "max_tokens": 2}),
          "completions": ("/v1/completions", {"prompt": "a", "max_tokens": 2}),
          "responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
          "messages": ("/v1/messages", {"messages": MSG, "max_tokens": 2})}


def _post(client, route, agent=None, headers=None):
    path, body = ROUTES[route]
    extra = {} if agent is None else {"agent": agent}
    return client.post(path, headers=headers, json={"model": "fake-model", **body, **extra})


def _error(r):
    body = r.json()
    return body["error"] if "error" in body and isinstance(body["error"], dict) else body


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_body_hint_reaches_the_engine_and_an_absurd_one_is_clamped(client, backend, route):
    assert _post(client, route, {"expect_next_turn_s": 3}).status_code == 200
    assert backend.seen[-1].context.agent == AgentTurn(expect_next_turn_s=3.0)
    assert _post(client, route, {"expect_next_turn_s": 0.5}).status_code == 200
    assert backend.seen[-1].context.agent.expect_next_turn_s == 0.5
    assert _post(client, route, {"expect_next_turn_s": 1e9}).status_code == 200
    assert backend.seen[-1].context.agent.expect_next_turn_s == MAX_EXPECT_NEXT_TURN_S == 3600.0
    assert _post(client, route).status_code == 200
    assert backend.seen[-1].context.agent == AgentTurn()


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_bad_body_hint_is_a_400_naming_it(client, backend, route):
    for agent in ({"expect_next_turn_s": "3"}, {"expect_next_turn_s": -1},
                  {"expect_next_turn_s": True}, {"expect_next_turn_s": [3]}, {"x": 1}):
        r = _post(client, route, agent)
        assert r.status_code == 400, (route, agent, r.text)
        assert "agent." in str(_error(r)), (route, agent, r.text)
    r = _post(client, route, "soon")
    assert r.status_code == 400 and "agent" in str(_error(r))
    assert backend.seen == []


def test_the_header_hint_the_body_wins_and_bad_headers_are_400(client, backend):
    assert _post(client, "chat", headers={HEADER: " 2.5 "}).status_code == 200
    assert backend.seen[-1].context.agent.expect_next_turn_s == 2.5
    assert _post(client, "chat", headers={HEADER: "99999"}).status_code == 200
    assert backend.seen[-1].context.agent.expect_next_turn_s == 3600.0
    assert _post(client, "chat", {"expect_next_turn_s": 4}, headers={HEADER: "9"}).status_code == 200
    assert backend.seen[-1].context.agent.expect_next_turn_s == 4.0
    n = len(backend.seen)
    for bad in ("soon", "-1", "nan", "inf", ""):
        r = _post(client, "chat", headers={HEADER: bad})
        assert r.status_code == 400, bad
        assert r.json()["error"]["param"] == HEADER
    assert len(backend.seen) == n


def test_the_chat_body_400_names_the_nested_param(client, backend):
    r = _post(client, "chat", {"expect_next_turn_s": -2})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "agent.expect_next_turn_s"
    assert "at least 0" in r.json()["error"]["message"]
    r = _post(client, "chat", {"expect_next_turn_s": "3"})
    assert r.json()["error"]["param"] == "agent.expect_next_turn_s"
    r = _post(client, "chat", {"expect": 3})
    assert r.json()["error"]["param"] == "agent.expect"


class HermesTokenizer(ByteTokenizer):
    chat_template = "{{ '<tool_call>' }}"


def test_tools_with_a_tool_call_parser_carry_its_call_markers():
    backend = FakeBackend(reply="ok", tokenizer=HermesTokenizer())
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with TestClient(build_app(backend, ServerConfig())) as client:
        r = client.post("/v1/chat/completions", json={"model": "fake-model", "messages": MSG,
                                                       "max_tokens": 2, "tools": tools})
        assert r.status_code == 200, r.text
        assert backend.seen[-1].context.agent.tool_call_markers == ("<tool_call>",)
        client.post("/v1/chat/completions", json={"model": "fake-model", "messages": MSG, "max_tokens": 2})
        assert backend.seen[-1].context.agent.tool_call_markers == ()


def test_the_agent_turn_crosses_the_internal_wire(client, backend):
    _post(client, "chat", {"expect_next_turn_s": 7})
    req = backend.seen[-1]
    req = replace(req, context=replace(req.context, agent=AgentTurn(7.0, ("<tool_call>",))))
    back = request_from_dict(request_to_dict(req))
    assert back.context.agent == AgentTurn(7.0, ("<tool_call>",))
    d = request_to_dict(req)
    d["context"]["agent"]["expect_next_turn_s"] = -1
    with pytest.raises(Exception) as exc:
        request_from_dict(d)
    assert getattr(exc.value, "param", None) == "context.agent.expect_next_turn_s"
