"""In-process fake workers for gateway flow tests: an httpx MockTransport speaking the internal API.

The "model" is deterministic: next token = f(context), so any topology and any migration must
give the same stream. A worker can be told to die (connection refused) or to break its stream
after k tokens (like kill -9 mid-stream).
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import httpx
import orjson

from tandem.api.internal import wire
from tandem.http.client import ConnectFailed, ConnectionBroken, ResponseTimeout
from tandem.types import EngineRequest, FinishReason, KVHandle, RequestDelta, RequestTimings

EOS = 999


def next_token(context: list[int]) -> int:
    t = (sum(context) * 31 + 7 * len(context)) % 997
    return EOS if t == 3 else t


def greedy(prompt: list[int], max_tokens: int) -> list[int]:
    out: list[int] = []
    while len(out) < max_tokens:
        t = next_token(prompt + out)
        out.append(t)
        if t == EOS:
            break
    return out


class FakeCluster:
    def __init__(self, roles: dict[str, str]) -> None:
        self.roles = roles                        # url -> role
        self.dead: set[str] = set()
        self.break_after: dict[str, int] = {}     # url -> tokens to stream before the socket drops
        self.calls: list[tuple[str, str, list[int], bool]] = []  # (url, request id, resume, handle?)
        self.requests: list[EngineRequest] = []   # every generate request, as the worker decoded it
        self.refuse: dict[str, int] = {}          # url -> status its generate answers (e.g. 503)
        self.released: list[str] = []             # request ids of /internal/kv_release calls
        self.handles: dict[str, KVHandle] = {}    # prefill request id -> handle it gave out
        self.max_model_len: dict[str, int] = {}   # url -> the context it reports (none: not reported)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        url = f"http://{request.url.host}:{request.url.port}"
        if url in self.dead:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/internal/stats":
            stats = {"role": self.roles[url], "kv_layout": {"block_size": 4}, "num_running": 0,
                     "num_waiting": 0}
            if url in self.max_model_len:
                stats["max_model_len"] = self.max_model_len[url]
            return httpx.Response(200, json=stats)
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        if request.url.path == "/internal/kv_events":
            return httpx.Response(404)
        if request.url.path == "/internal/kv_release":
            self.released.append(orjson.loads(await request.aread())["request_id"])
            return httpx.Response(200, json={})
        req = wire.request_from_dict(orjson.loads(await request.aread()))
        self.calls.append((url, req.request_id, list(req.resume_output_ids), req.kv_handle is not None))
        self.requests.append(req)
        if url in self.refuse:
            return httpx.Response(self.refuse[url], json={"error": {"message": "overloaded"}})
        if req.prompt_token_ids and req.prompt_token_ids[0] < 0:
            return httpx.Response(400, json={"error": {"message": "too long", "type": "invalid_request_error",
                                                       "param": "messages", "code": "context_length_exceeded"}})
        return httpx.Response(200, stream=self._body(url, req),
                              headers={"content-type": "application/x-ndjson"})

    def _body(self, url: str, req):
        role = self.roles[url]
        cluster = self

        class Body(httpx.AsyncByteStream):
            async def __aiter__(self):
                ctx = req.prompt_token_ids + req.resume_output_ids
                out = list(req.resume_output_ids)
                sp = req.sampling
                streamed = 0
                limit = cluster.break_after.get(url)
                t = RequestTimings(0.0, 0.01, 0.02, 0.03)
                while True:
                    await asyncio.sleep(0)
                    if limit is not None and streamed >= limit:
                        raise httpx.ReadError("connection reset by peer")
                    tok = next_token(ctx)
                    ctx.append(tok)
                    out.append(tok)
                    streamed += 1
                    done = (tok == EOS and not sp.ignore_eos) or len(out) >= sp.max_tokens
                    common = dict(request_id=req.request_id, new_token_ids=[tok], new_text=f"<{tok}>",
                                  num_prompt_tokens=len(req.prompt_token_ids),
                                  num_cached_tokens=4 * (len(req.prompt_token_ids) // 8),
                                  num_output_tokens=len(out))
                    if req.prefill_only and not done:
                        h = KVHandle(worker=url, request_id=req.request_id, block_ids=(1,),
                                     num_tokens=len(ctx) - 1, layout={})
                        cluster.handles[req.request_id] = h
                        d = RequestDelta(finished=True, kv_handle=h, timings=t, **common)
                    elif done:
                        reason = FinishReason.STOP if tok == EOS else FinishReason.LENGTH
                        d = RequestDelta(finished=True, finish_reason=reason, timings=t, **common)
                    else:
                        d = RequestDelta(**common)
                    assert role != "prefill" or req.prefill_only
                    yield orjson.dumps(wire.delta_to_dict(d)) + b"\n"
                    if d.finished:
                        return

        return Body()


class HttpxWorkerHTTP:
    """The gateway's `WorkerHTTP` interface over an httpx client, so that the flow tests can run
    on an httpx MockTransport; httpx errors become the gateway client's errors."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @asynccontextmanager
    async def stream(self, method: str, base_url: str, path: str, body: bytes = b"",
                     read_timeout_s: float = 120.0, headers=None):
        try:
            async with self.client.stream(method, base_url + path, content=body, headers=headers,
                                          timeout=read_timeout_s) as r:
                yield _HttpxResponse(r)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ConnectFailed(str(exc)) from exc
        except httpx.TimeoutException as exc:
            raise ResponseTimeout(str(exc)) from exc
        except httpx.TransportError as exc:
            raise ConnectionBroken(repr(exc)) from exc


class _HttpxResponse:
    def __init__(self, r: httpx.Response) -> None:
        self._r = r
        self.status = r.status_code

    async def lines(self):
        async for line in self._r.aiter_lines():
            yield line.encode()

    async def read(self) -> bytes:
        return await self._r.aread()

    def expect_end(self) -> None:
        pass


def worker_http(cluster: FakeCluster) -> HttpxWorkerHTTP:
    return HttpxWorkerHTTP(httpx.AsyncClient(transport=cluster.transport()))
