"""Bearer authentication, and the tenant a key names.

When keys are configured, every route but /health and /metrics needs
`Authorization: Bearer <one of keys>`, or `x-api-key: <one of keys>` as Anthropic's clients send
it (401 otherwise). The key a request authenticated with
names its tenant, "key-<i>" for the i-th configured key (counted from 0 over every --api-key
value, comma-separated ones included), written into the ASGI scope for the route to put into
the request's RequestContext (tandem.api.request_context). Without keys the tenant is None.

What a tenant creates (files, batches, queued requests, stored responses, subscriptions) is its
own: routes pass `owner_of(scope)` to the stores, which answer another tenant's ids as absent
(404, the same as an id that never existed). Without keys every caller is one tenant, the
anonymous one.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from tandem.api.errors import error_response_for_path
from tandem.asyncq.job import ANONYMOUS
from tandem.errors import Unauthorized

OPEN_PATHS = ("/health", "/metrics")
TENANT_SCOPE_KEY = "tandem.tenant"   # the scope's extension key (ASGI scopes may carry extra keys)


def tenant_of(scope: Scope) -> str | None:
    return scope.get(TENANT_SCOPE_KEY)


def owner_of(scope: Scope) -> str:
    """The tenant owning what the request creates and reads in the queue's store: its key's
    tenant, or ANONYMOUS ("") on a server without keys."""
    return tenant_of(scope) or ANONYMOUS


class BearerAuth:
    """401 unless `Authorization: Bearer <one of keys>`; /health and /metrics stay open."""

    def __init__(self, app: ASGIApp, keys: Sequence[str]) -> None:
        self.app = app
        self.keys = [k.encode() for k in keys]

    def key_index(self, scope: Scope) -> int | None:
        """Which configured key the request carries (`Authorization: Bearer KEY`, or Anthropic's
        `x-api-key: KEY`); None for none."""
        headers = scope["headers"]
        value = next((v for k, v in headers if k == b"authorization"), b"")
        scheme, _, token = value.partition(b" ")
        if scheme.lower() != b"bearer":
            token = next((v for k, v in headers if k == b"x-api-key"), b"")
            if not token:
                return None
        token = token.strip()
        # Compare with every key (no early exit) so timing reveals nothing.
        hits = [hmac.compare_digest(token, k) for k in self.keys]
        return hits.index(True) if any(hits) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        index = self.key_index(scope)
        if index is None:
            err = Unauthorized("missing or invalid API key; send 'Authorization: Bearer <key>' "
                               "(or 'x-api-key: <key>')")
            await error_response_for_path(scope["path"], err)(scope, receive, send)
            return
        scope[TENANT_SCOPE_KEY] = f"key-{index}"
        await self.app(scope, receive, send)
