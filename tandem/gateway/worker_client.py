"""Calls to one worker's internal API, as typed values: EngineRequest in, RequestDelta out.

`POST /internal/generate` (ndjson, one delta per line; docs/dev/contracts.md). Failures split in two:
- the worker refused the request for a reason the caller caused (4xx other than 401, 403, 429): the
  worker's own TandemError is re-raised with its status, type, code and param, so the client
  gets the same answer it would get from the worker;
- the worker could not serve it (connection refused or reset, timeout, 5xx, 429/503, 401/403 (it
  refused the gateway's cluster secret: a misconfiguration, never the client's answer), a stream
  that breaks or ends without a final delta, a final delta with finish_reason=error):
  `WorkerFailed`, which the flow answers by retrying or migrating elsewhere.
The HTTP layer is anything with `WorkerHTTP.stream` (tandem.http.client.HTTPClient in
the gateway; tests adapt httpx mock transports to it).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Protocol

import orjson

from tandem.api.internal import wire
from tandem.errors import PromptTooLong, TandemError
from tandem.http.client import ConnectFailed, HTTPFailure, ResponseTimeout
from tandem.types import EngineRequest, FinishReason, RequestDelta

log = logging.getLogger(__name__)

GENERATE_PATH = "/internal/generate"
RELEASE_PATH = "/internal/kv_release"


class WorkerResponse(Protocol):
    status: int

    def lines(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    def expect_end(self) -> None: ...


class WorkerHTTP(Protocol):
    """Raises tandem.http.client's ConnectFailed, ResponseTimeout, ConnectionBroken."""

    def stream(self, method: str, base_url: str, path: str, body: bytes = b"",
               read_timeout_s: float = 120.0, headers: Mapping[str, str] | None = None
               ) -> AbstractAsyncContextManager[WorkerResponse]: ...


class WorkerFailed(Exception):
    def __init__(self, url: str, message: str, hard: bool, pool: str = "both",
                 also_exclude: str | None = None) -> None:
        super().__init__(f"worker {url}: {message}")
        self.url = url
        self.message = message
        self.hard = hard  # the worker looks dead (connection level), not just this request
        self.pool = pool  # the role the worker was called in (metrics label)
        # another worker to avoid on the retry: a decode call that failed before its first
        # token most likely could not pull the KV from this prefill worker
        self.also_exclude = also_exclude


def error_from_body(status: int, body: bytes) -> TandemError:
    """Rebuild the worker's TandemError from its OpenAI-style error JSON (a context overflow as
    PromptTooLong, which each API's envelope words its own way)."""
    try:
        e = orjson.loads(body)["error"]
        cls = PromptTooLong if e.get("code") == PromptTooLong.code else TandemError
        err = cls(str(e.get("message") or "request rejected by worker"), e.get("param"))
        err.error_type = e.get("type") or err.error_type
        err.code = e.get("code")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        err = TandemError(body.decode(errors="replace")[:500] or f"worker answered {status}")
    err.status = status
    return err


async def stream_generate(http: WorkerHTTP, url: str, req: EngineRequest, pool: str = "both",
                          read_timeout_s: float = 120.0, headers: Mapping[str, str] | None = None
                          ) -> AsyncIterator[RequestDelta]:
    """Deltas of `req` on worker `url` (called in role `pool`); ends after the final delta.
    `headers`: sent with the call (the gateway's `traceparent`)."""
    body = orjson.dumps(wire.request_to_dict(req))
    try:
        async with http.stream("POST", url, GENERATE_PATH, body, read_timeout_s, headers) as r:
            if r.status != 200:
                data = await r.read()
                if r.status in (401, 403):   # the gateway's credential, not the client's fault
                    raise WorkerFailed(url, f"refused the gateway's cluster secret ({r.status}): "
                                       f"its --cluster-secret differs", False, pool)
                if 400 <= r.status < 500 and r.status != 429:
                    raise error_from_body(r.status, data)
                raise WorkerFailed(url, f"answered {r.status}: {data[:200]!r}", False, pool)
            # closed explicitly: an async generator left to the garbage collector costs a task
            async with aclosing(r.lines()) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    delta = wire.delta_from_dict(orjson.loads(line))
                    if delta.finished:
                        r.expect_end()  # the worker ends the body now: keep the connection
                        if delta.finish_reason is FinishReason.ERROR:
                            raise WorkerFailed(url, f"request failed: {delta.error}", False, pool)
                    yield delta
                    if delta.finished:
                        return
    except ConnectFailed as exc:
        raise WorkerFailed(url, f"cannot connect: {exc}", True, pool) from exc
    except ResponseTimeout as exc:  # slow, not necessarily dead: health polls decide
        raise WorkerFailed(url, f"timed out: {exc}", False, pool) from exc
    except (HTTPFailure, orjson.JSONDecodeError) as exc:
        raise WorkerFailed(url, f"stream broke: {exc!r}", True, pool) from exc
    raise WorkerFailed(url, "stream ended without a final delta", True, pool)


async def release_kv(http: WorkerHTTP, url: str, request_id: str) -> None:
    """Tell a prefill worker that nobody will pull `request_id`'s blocks. Best effort: the
    worker's pin timeout frees them anyway if this call does not arrive."""
    try:
        async with http.stream("POST", url, RELEASE_PATH,
                               orjson.dumps({"request_id": request_id}), 2.0) as r:
            await r.read()
    except HTTPFailure as exc:
        log.info("could not release KV of %s on %s: %s", request_id, url, exc)
