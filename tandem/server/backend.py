"""What the HTTP routes need from whatever generates tokens.

A worker passes its `AsyncEngine`; the gateway passes its own implementation (a remote
prefill -> decode flow). The routes use nothing else, so they serve both unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tandem.types import EngineRequest, EngineStats, RequestDelta

if TYPE_CHECKING:
    from tandem.kv.layout import KVLayout
    from tandem.models.tokenizer import Tokenizer


@dataclass
class ResponseInfo:
    """Facts a backend reports about one HTTP request, filled while it serves it.

    Invariant: a backend sets every header before it yields its first delta. The routes wait
    for the first delta of every engine request before they send the status line, so the
    headers reach the client even on a stream (e.g. the gateway's x-tandem-prefill and
    x-tandem-decode naming the workers it picked).
    """

    headers: dict[str, str] = field(default_factory=dict)

    def set_header(self, name: str, value: str) -> None:
        """Set a response header. Engine requests of one HTTP request (n > 1, a list of
        prompts) share one ResponseInfo; differing values are joined with ", "."""
        name = name.lower()
        old = self.headers.get(name)
        if old is None:
            self.headers[name] = value
        elif value not in old.split(", "):
            self.headers[name] = f"{old}, {value}"


@runtime_checkable
class Backend(Protocol):
    """Generates tokens for engine requests (docs/dev/contracts.md, "Engine front").

    `generate` raises a `TandemError` before its first delta for bad input (too long ->
    `PromptTooLong`). Closing or cancelling the iterator aborts the request and frees its
    KV blocks. `info`, when given, is filled before the first delta (see ResponseInfo).
    """

    model_name: str
    max_model_len: int
    tokenizer: "Tokenizer"

    def generate(self, req: EngineRequest,
                 info: ResponseInfo | None = None) -> AsyncIterator[RequestDelta]: ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...


@runtime_checkable
class WorkerBackend(Backend, Protocol):
    """A backend that owns a KV cache: what the worker's internal API reports to the gateway."""

    kv_layout: "KVLayout"
    role: str  # both | prefill | decode
