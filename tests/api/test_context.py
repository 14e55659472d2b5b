"""What a backend can do is decided once, from the protocols it satisfies, and the routes follow."""

from dataclasses import dataclass, field

import pytest
from starlette.testclient import TestClient

from tandem.config import CacheConfig, EngineConfig, ModelConfig
from tandem.kv.events import EventBatch, KVEvent
from tandem.kv.layout import KVLayout
from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.context import ServerContext
from tests.api.fakes import FakeBackend

LAYOUT = KVLayout(model="m", dtype="float32", block_size=16, num_layers=2, num_kv_heads=2, head_dim=8)


@dataclass
class FakeWorker(FakeBackend):
    """A backend with its own KV cache, KV events and a KV handoff, like AsyncEngine."""

    model_path: str = "/models/fake"
    kv_layout: KVLayout = LAYOUT
    role: str = "prefill"
    config: EngineConfig = EngineConfig(model=ModelConfig(path="/models/fake"),
                                        cache=CacheConfig(hash_seed=7, enable_prefix_caching=False))
    transport_address: str | None = "127.0.0.1:7000"
    released: list = field(default_factory=list)

    def kv_events(self, since: int) -> EventBatch:
        return EventBatch(seq=since + 1, events=(KVEvent(since + 1, "stored", (2**64 - 1,)),), reset=False)

    def release_kv(self, request_id: str) -> None:
        self.released.append(request_id)


class NotStarted:
    """AsyncEngine before start(): its facts are properties that fail until its model is loaded."""

    config = FakeWorker.config
    model_path = "/models/fake"
    role = "decode"

    def _not_loaded(self):
        raise AttributeError("no model loaded yet")

    model_name = max_model_len = tokenizer = kv_layout = transport_address = property(_not_loaded)

    async def generate(self, req, info):
        yield None

    def abort(self, request_id: str) -> None: ...

    def stats(self): ...

    def kv_events(self, since: int): ...

    def release_kv(self, request_id: str) -> None: ...


def test_a_worker_backend_reports_its_facts_events_and_handoff():
    backend = FakeWorker()
    with TestClient(build_app(backend, ServerConfig())) as c:
        s = c.get("/internal/stats").json()
        assert (s["role"], s["kv_layout"], s["hash_seed"], s["enable_prefix_caching"]) == \
            ("prefill", LAYOUT.to_dict(), 7, False)
        assert s["transport_address"] == "127.0.0.1:7000" and s["max_model_len"] == 256
        assert c.get("/internal/kv_events?since=4").json() == {
            "seq": 5, "reset": False, "events": [{"seq": 5, "type": "stored", "block_hashes": [str(2**64 - 1)]}]}
        assert c.post("/internal/kv_release", json={"request_id": "p-1"}).json() == {"released": "p-1"}
        assert backend.released == ["p-1"]
        assert c.get("/v1/models").json()["data"][0]["root"] == "/models/fake"


def test_a_plain_backend_has_no_worker_routes():
    with TestClient(build_app(FakeBackend(), ServerConfig())) as c:
        assert c.get("/internal/stats").json()["hash_seed"] is None
        assert c.post("/internal/kv_release", json={"request_id": "p-1"}).status_code == 404
        assert c.get("/v1/models").json()["data"][0]["root"] == "fake-model"


def test_capabilities_are_decided_without_reading_properties():
    backend = NotStarted()
    ctx = ServerContext.create(backend, ServerConfig())
    assert ctx.worker is backend and ctx.kv_events is backend and ctx.kv_handoff is backend
    assert ctx.readiness is None
    plain = ServerContext.create(FakeBackend(), ServerConfig())
    assert (plain.worker, plain.kv_events, plain.kv_handoff) == (None, None, None)


def test_a_backend_without_generate_is_refused_when_the_app_is_built():
    @dataclass
    class Mute:
        model_name: str = "m"
        max_model_len: int = 8
        tokenizer: object = None

        def abort(self, request_id: str) -> None: ...

        def stats(self): ...

    with pytest.raises(TypeError, match="lacks generate"):
        build_app(Mute(), ServerConfig())
