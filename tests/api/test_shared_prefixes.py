"""--shared-prefixes in the app: each engine request carries its prompt's shared tokens, set by the
route that built it (a worker keeps what its gateway set), and a declaration the chat template
rejects stops the start naming the entry."""

from __future__ import annotations

import orjson
import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.internal import wire
from tandem.turn.shared_prefix_file import parse_shared_prefixes
from tandem.types import EngineRequest, RequestContext, SamplingParams
from tests.api.fakes import FakeBackend

SYSTEM = {"role": "system", "content": "You answer questions about Acme's orders."}
SECRET = "s" * 32
KEYS = ("key-a-secret", "key-b-secret")


def declare(*entries) -> tuple:
    return parse_shared_prefixes(orjson.dumps({"prefixes": list(entries)}).decode(), "p.json")


def app(backend, *entries):
    return build_app(backend, ServerConfig(api_keys=KEYS, cluster_secret=SECRET,
                                           shared_prefixes=declare(*entries)))


def test_every_route_sets_the_prompts_shared_tokens():
    backend = FakeBackend(reply="ok")
    tok = backend.tokenizer
    system_ids = tok.encode(tok.apply_chat_template([SYSTEM], add_generation_prompt=False),
                            add_special_tokens=False)
    with TestClient(app(backend, {"messages": [SYSTEM]}, {"text": "Q: "})) as c:
        a = {"authorization": f"Bearer {KEYS[0]}"}
        r = c.post("/v1/chat/completions", headers=a, json={
            "model": "fake-model", "max_tokens": 2,
            "messages": [SYSTEM, {"role": "user", "content": "Where is order 7?"}]})
        assert r.status_code == 200, r.text
        assert backend.seen[-1].context.shared_prefix_tokens == len(system_ids)
        assert backend.seen[-1].context.tenant == "key-0"
        # another system prompt: it leaves the declaration at its first differing token
        other = {"role": "system", "content": "You answer questions about Bcme's orders."}
        c.post("/v1/chat/completions", headers=a, json={
            "model": "fake-model", "max_tokens": 2, "messages": [other, {"role": "user", "content": "x"}]})
        assert backend.seen[-1].context.shared_prefix_tokens == \
            len(tok.encode("<s>system: You answer questions about ", add_special_tokens=False))
        # completions: per prompt, the text declaration as the route tokenizes it (BOS included)
        c.post("/v1/completions", headers=a, json={"model": "fake-model", "max_tokens": 2,
                                                   "prompt": ["Q: why?", "A: because"]})
        assert [q.context.shared_prefix_tokens for q in backend.seen[-2:]] == [4, 1]   # BOS "Q: " / BOS
        # Workers AI's route and Anthropic's go through the same run
        c.post("/client/v4/accounts/acct/ai/run/@cf/fake-model", headers=a, json={
            "messages": [SYSTEM, {"role": "user", "content": "hi"}], "max_tokens": 2})
        assert backend.seen[-1].context.shared_prefix_tokens == len(system_ids)
        c.post("/v1/messages", headers=a, json={"model": "fake-model", "max_tokens": 2,
                                                "system": SYSTEM["content"],
                                                "messages": [{"role": "user", "content": "hi"}]})
        assert backend.seen[-1].context.shared_prefix_tokens == len(system_ids)


def test_a_worker_keeps_the_shared_tokens_its_gateway_set():
    """The internal route's requests were built by a gateway: this app's own declaration (here
    one that would match the whole prompt) does not replace the gateway's count."""
    backend = FakeBackend(reply="ok")
    with TestClient(app(backend, {"token_ids": [5, 6, 7, 8]})) as c:
        req = EngineRequest("gw-1", [5, 6, 7, 8], SamplingParams(max_tokens=2),
                            context=RequestContext(tenant="key-0", shared_prefix_tokens=2))
        r = c.post("/internal/generate", content=orjson.dumps(wire.request_to_dict(req)),
                   headers={"x-tandem-cluster-secret": SECRET})
        assert r.status_code == 200, r.text
        assert backend.seen[-1].context.shared_prefix_tokens == 2
        # and a gateway without declarations sends 0: nothing is shared on the worker either
        req.context = RequestContext(tenant="key-0")
        c.post("/internal/generate", content=orjson.dumps(wire.request_to_dict(req)),
               headers={"x-tandem-cluster-secret": SECRET})
        assert backend.seen[-1].context.shared_prefix_tokens == 0


def test_without_declarations_nothing_is_shared():
    backend = FakeBackend(reply="ok")
    with TestClient(build_app(backend, ServerConfig(api_keys=KEYS))) as c:
        c.post("/v1/completions", headers={"authorization": f"Bearer {KEYS[1]}"},
               json={"model": "fake-model", "max_tokens": 2, "prompt": "Q: why?"})
        assert backend.seen[-1].context.shared_prefix_tokens == 0


def test_a_declaration_the_chat_template_rejects_stops_the_start_naming_it():
    # the fake template refuses a conversation that ends with an assistant saying "bad"
    bad = app(FakeBackend(), {"text": "fine"}, {"messages": [{"role": "assistant", "content": "bad"}]})
    with pytest.raises(ValueError, match=r"--shared-prefixes p\.json prefixes\[1\]: the chat template"):
        with TestClient(bad):
            pass
