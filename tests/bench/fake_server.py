"""A fake OpenAI streaming server for testing the benchmark client without an engine.

It streams `chunk_tokens` tokens per SSE chunk every `token_delay_s`, reports usage with
`cached_tokens` from a perfect prefix cache over full `block_size`-token blocks of the prompt
(token-id prompts; chat prompts count one token per word), records the largest number of
requests in flight, and fails requests that carry the header `x-fail`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


@dataclass
class FakeState:
    chunk_tokens: int = 1
    token_delay_s: float = 0.002
    block_size: int = 16
    empty_text: bool = False       # every chunk's text is "" (tokens that decode to nothing)
    cached_blocks: set = field(default_factory=set)
    inflight: int = 0
    max_inflight: int = 0
    bodies: list = field(default_factory=list)
    headers: list = field(default_factory=list)


def _prompt_ids(body: dict) -> list:
    if "messages" in body:
        words = []
        for m in body["messages"]:
            words += [f"{m['role']}:"] + str(m["content"]).split()
        return words
    p = body["prompt"]
    return p if isinstance(p, list) else str(p).split()


def _cached(state: FakeState, ids: list) -> int:
    """Longest cached prefix in full blocks (never the whole prompt), then cache every full block."""
    bs = state.block_size
    hit = 0
    keys = [tuple(ids[: (i + 1) * bs]) for i in range(len(ids) // bs)]
    for k in keys:
        if k in state.cached_blocks:
            hit += bs
        else:
            break
    state.cached_blocks.update(keys)
    return min(hit, max(0, (len(ids) - 1) // bs * bs))


def make_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    async def handle(request: Request, chat: bool):
        body = await request.json()
        state.bodies.append(body)
        state.headers.append(dict(request.headers))
        if "x-fail" in request.headers:
            return JSONResponse({"error": {"message": "injected failure", "type": "server_error"}},
                                status_code=503)
        ids = _prompt_ids(body)
        cached = _cached(state, ids)
        n = int(body.get("max_tokens", 16))
        continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))

        async def stream():
            state.inflight += 1
            state.max_inflight = max(state.max_inflight, state.inflight)
            try:
                sent = 0
                if chat:
                    yield b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
                while sent < n:
                    await asyncio.sleep(state.token_delay_s)
                    k = min(state.chunk_tokens, n - sent)
                    sent += k
                    text = "" if state.empty_text else " tok" * k
                    choice = ({"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text})
                    if sent == n:
                        choice["finish_reason"] = "length"
                    event = {"choices": [choice]}
                    if continuous:
                        event["usage"] = {"prompt_tokens": len(ids), "completion_tokens": sent}
                    yield b"data: " + orjson.dumps(event) + b"\n\n"
                usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n,
                         "prompt_tokens_details": {"cached_tokens": cached}}
                yield b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
                yield b"data: [DONE]\n\n"
            finally:
                state.inflight -= 1

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"x-tandem-prefill": "w0", "x-tandem-decode": "w1"})

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await handle(request, chat=True)

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer:
    """Context manager: serves make_app(state) on 127.0.0.1 in a thread; `url` is its base URL."""

    def __init__(self, state: FakeState | None = None, port: int | None = None) -> None:
        self.state = state or FakeState()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(make_app(self.state), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> "FakeServer":
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("fake server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
