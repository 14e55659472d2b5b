"""Calls to one worker's internal API, as typed values: EngineRequest in, RequestDelta out.

`POST /internal/generate` (ndjson, one delta per line; docs/dev/contracts.md). Failures split in two:
- the worker refused the request for a reason the caller caused (4xx other than 429): the
  worker's own TandemError is re-raised with its status, type, code and param, so the client
  gets the same answer it would get from the worker;
- the worker could not serve it (connection refused or reset, timeout, 5xx, 429/503, a stream
  that breaks or ends without a final delta, a final delta with finish_reason=error):
  `WorkerFailed`, which the flow answers by retrying or migrating elsewhere.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import orjson

from tandem.errors import TandemError
from tandem.server import wire
from tandem.types import EngineRequest, FinishReason, RequestDelta

log = logging.getLogger(__name__)


class WorkerFailed(Exception):
    def __init__(self, url: str, message: str, hard: bool) -> None:
        super().__init__(f"worker {url}: {message}")
        self.url = url
        self.hard = hard  # the worker looks dead (connection level), not just this request


def error_from_body(status: int, body: bytes) -> TandemError:
    """Rebuild the worker's TandemError from its OpenAI-style error JSON."""
    try:
        e = orjson.loads(body)["error"]
        err = TandemError(str(e.get("message") or "request rejected by worker"), e.get("param"))
        err.error_type = e.get("type") or err.error_type
        err.code = e.get("code")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        err = TandemError(body.decode(errors="replace")[:500] or f"worker answered {status}")
    err.status = status
    return err


async def stream_generate(client: httpx.AsyncClient, url: str, req: EngineRequest,
                          read_timeout_s: float = 120.0) -> AsyncIterator[RequestDelta]:
    """Deltas of `req` on worker `url`; ends after the final delta (finished=True)."""
    body = orjson.dumps(wire.request_to_dict(req))
    timeout = httpx.Timeout(connect=client.timeout.connect, read=read_timeout_s,
                            write=read_timeout_s, pool=read_timeout_s)
    try:
        async with client.stream("POST", f"{url}/internal/generate", content=body, timeout=timeout,
                                 headers={"content-type": "application/json"}) as r:
            if r.status_code != 200:
                data = await r.aread()
                if 400 <= r.status_code < 500 and r.status_code != 429:
                    raise error_from_body(r.status_code, data)
                raise WorkerFailed(url, f"answered {r.status_code}: {data[:200]!r}", hard=False)
            async for line in r.aiter_lines():
                if not line.strip():
                    continue
                delta = wire.delta_from_dict(orjson.loads(line))
                if delta.finished and delta.finish_reason is FinishReason.ERROR:
                    raise WorkerFailed(url, f"request failed: {delta.error}", hard=False)
                yield delta
                if delta.finished:
                    return
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise WorkerFailed(url, f"cannot connect: {exc}", hard=True) from exc
    except httpx.TimeoutException as exc:  # slow, not necessarily dead: health polls decide
        raise WorkerFailed(url, f"timed out: {exc!r}", hard=False) from exc
    except (httpx.TransportError, orjson.JSONDecodeError) as exc:
        raise WorkerFailed(url, f"stream broke: {exc!r}", hard=True) from exc
    raise WorkerFailed(url, "stream ended without a final delta", hard=True)


async def release_kv(client: httpx.AsyncClient, url: str, request_id: str) -> None:
    """Tell a prefill worker that nobody will pull `request_id`'s blocks. Best effort: the
    worker's pin timeout frees them anyway if this call does not arrive."""
    try:
        await client.post(f"{url}/internal/kv_release", content=orjson.dumps({"request_id": request_id}),
                          headers={"content-type": "application/json"}, timeout=2.0)
    except httpx.HTTPError as exc:
        log.info("could not release KV of %s on %s: %s", request_id, url, exc)
