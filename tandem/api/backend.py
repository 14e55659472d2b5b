"""What the HTTP routes need from whatever generates tokens, as typed protocols.

A worker passes its `AsyncEngine`; the gateway passes its own implementation (a remote
prefill -> decode flow). The routes use nothing but `Backend`, so they serve both unchanged.
What a backend can do beyond that is declared by the protocols it satisfies, checked once when
the app is built (`ServerContext.create`), never probed per request:
- `WorkerBackend`: it owns a KV cache; /internal/stats reports its layout, role and cache facts;
- `KVEventSource`: /internal/kv_events serves its block stored/removed events;
- `KVHandoffSource`: /internal/kv_release frees blocks it pinned for a decode worker;
- `Readiness`: /health also asks it whether it can serve now (the gateway: a routable pool).

The check reads no attribute (`provides`): a backend's facts may be properties that only work
once it has started (AsyncEngine loads its model in start()), and Python 3.11's isinstance on a
protocol with data members would call them.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tandem.types import EngineRequest, EngineStats, RequestDelta

if TYPE_CHECKING:
    from tandem.config import EngineConfig
    from tandem.kv.events import EventBatch
    from tandem.kv.layout import KVLayout
    from tandem.tokenization.tokenizer import Tokenizer


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
    KV blocks. `info` is filled before the first delta (see ResponseInfo). Who sends the
    request and how to serve it travels in `req.context` (tandem.types.RequestContext).
    """

    model_name: str
    max_model_len: int
    tokenizer: "Tokenizer"

    def generate(self, req: EngineRequest, info: ResponseInfo | None) -> AsyncIterator[RequestDelta]: ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...


@runtime_checkable
class WorkerBackend(Backend, Protocol):
    """A backend that owns a KV cache: what the worker's internal API reports to the gateway."""

    model_path: str                   # the checkpoint directory (/v1/models' "root")
    kv_layout: "KVLayout"
    role: str                         # both | prefill | decode
    config: "EngineConfig"            # .cache.hash_seed and .cache.enable_prefix_caching
    transport_address: str | None     # where decode workers pull KV blocks from (None: no handoff)


@runtime_checkable
class KVEventSource(Protocol):
    """Publishes the blocks its prefix cache stores and evicts (tandem.kv.events)."""

    def kv_events(self, since: int) -> "EventBatch": ...


@runtime_checkable
class KVHandoffSource(Protocol):
    """Pins a prefill's KV blocks for a decode worker; frees them when told nobody will pull."""

    def release_kv(self, request_id: str) -> None: ...


@runtime_checkable
class Readiness(Protocol):
    """Can serve a request right now (checked by /health besides the app's own start-up), and
    what /health's body says about it (the gateway: its pools' state)."""

    def ready(self) -> bool: ...

    def health_detail(self) -> dict: ...


_ABSENT = object()


def protocol_members(proto: type) -> list[str]:
    """The attributes and public methods `proto` and its protocol bases declare."""
    names: dict[str, None] = {}
    for base in reversed(proto.__mro__):
        if Protocol not in base.__bases__:
            continue
        names.update(dict.fromkeys(vars(base).get("__annotations__", {})))
        names.update(dict.fromkeys(n for n, v in vars(base).items()
                                   if callable(v) and not n.startswith("_")))
    return list(names)


def missing_members(obj: object, proto: type) -> list[str]:
    """What `obj` lacks of `proto`, found without reading any attribute (see the module doc)."""
    return [n for n in protocol_members(proto) if inspect.getattr_static(obj, n, _ABSENT) is _ABSENT]


def provides(obj: object, proto: type) -> bool:
    return not missing_members(obj, proto)
