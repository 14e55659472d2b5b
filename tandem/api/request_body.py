"""Reading a request body as one JSON object, bounded in size, and parsing it off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from starlette.requests import Request

from tandem.api.errors import BodyTooLarge
from tandem.errors import InvalidRequest

T = TypeVar("T")

# Bodies this large are parsed (chat template + tokenization) on a worker thread, so that
# the event loop keeps streaming other requests' tokens meanwhile. Small ones are cheaper inline.
OFF_LOOP_BYTES = 32 * 1024


def _too_large(max_bytes: int) -> BodyTooLarge:
    return BodyTooLarge(f"request body exceeds the limit of {max_bytes} bytes")


async def read_json_object(request: Request, max_bytes: int) -> dict:
    """The body parsed as a JSON object; BodyTooLarge (413) or InvalidRequest (400) otherwise."""
    return (await read_json_body(request, max_bytes))[0]


async def read_json_body(request: Request, max_bytes: int) -> tuple[dict, int]:
    """Like read_json_object, with the body's size in bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    return parse_json_object(b"".join(chunks)), size


def parse_json_object(raw: bytes) -> dict:
    if not raw.strip():
        raise InvalidRequest("request body is empty; expected a JSON object")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRequest("request body must be a JSON object")
    return obj


async def parse_off_loop(parse: Callable[[dict, Any], T], body: dict, pctx: Any, size: int) -> T:
    """`parse(body, pctx)`, on a worker thread when the body has at least OFF_LOOP_BYTES bytes."""
    if size < OFF_LOOP_BYTES:
        return parse(body, pctx)
    return await asyncio.to_thread(parse, body, pctx)
