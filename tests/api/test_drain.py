"""A draining worker's HTTP side (tandem/api/drain.py): new generation calls get 503, the rest is
served, /internal/stats and /health say it, and calls in flight are counted to their end."""

import asyncio

import httpx
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.drain import DrainGate, DrainState
from tests.api.fakes import FakeBackend


def test_draining_refuses_new_generation_and_says_so():
    app = build_app(FakeBackend(), ServerConfig())
    with TestClient(app) as c:
        body = {"model": "fake-model", "prompt": "hi", "max_tokens": 2}
        assert c.post("/v1/completions", json=body).status_code == 200
        assert c.get("/internal/stats").json()["draining"] is False
        app.state.ctx.drain.draining = True
        r = c.post("/v1/completions", json=body)
        assert r.status_code == 503 and r.json()["error"]["code"] == "worker_draining"
        r = c.post("/client/v4/accounts/a/ai/run/@cf/x/fake-model", json={"prompt": "hi"})
        assert r.status_code == 503 and r.json()["success"] is False
        assert c.post("/internal/generate", json={}).status_code == 503
        assert c.get("/health").json() == {"status": "draining"}
        assert c.get("/internal/stats").json()["draining"] is True
        assert c.get("/v1/models").status_code == 200            # reads are still served
        assert c.post("/internal/kv_release", json={"request_id": "x"}).status_code != 503
        assert app.state.ctx.drain.in_flight == 0


def test_gate_counts_a_stream_until_its_last_byte():
    state = DrainState()
    release = asyncio.Event()

    async def streaming(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await release.wait()
        await send({"type": "http.response.body", "body": b"b"})

    async def main():
        gate = DrainGate(streaming, state)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(gate), base_url="http://w") as c:
            call = asyncio.ensure_future(c.post("/v1/completions", json={}))
            await asyncio.sleep(0.05)
            assert state.in_flight == 1
            state.draining = True      # draining does not touch calls already admitted
            release.set()
            r = await call
            assert r.content == b"ab" and state.in_flight == 0
            assert (await c.post("/v1/completions", json={})).status_code == 503
            assert state.in_flight == 0

    asyncio.run(main())
