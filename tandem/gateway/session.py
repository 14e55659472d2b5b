"""The request headers the gateway's backend needs, carried from the HTTP layer to `generate`.

The server's routes call `Backend.generate(EngineRequest, ResponseInfo)`, which carries no
request headers. This ASGI middleware puts the session id (x-session-affinity) in a context
variable for the duration of one HTTP request; `generate` runs inside that request's context
(the routes call it from the handler or from tasks it starts, which copy the context).
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

SESSION_HEADER = b"x-session-affinity"
MAX_SESSION_ID = 256

_session: ContextVar[str | None] = ContextVar("tandem_gateway_session", default=None)


def current_session() -> str | None:
    return _session.get()


class SessionMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        value = None
        for name, raw in scope.get("headers", ()):
            if name == SESSION_HEADER:
                value = raw.decode("latin-1").strip()[:MAX_SESSION_ID] or None
                break
        if value is None and _session.get() is None:
            await self.app(scope, receive, send)   # nothing to carry (the common case)
            return
        token = _session.set(value)
        try:
            await self.app(scope, receive, send)
        finally:
            _session.reset(token)
