"""Bearer authentication, the tenant a key names, and the cluster's own credential.

Two kinds of caller, each with its own credential:
- tenants: when keys are configured (--api-key), every route but /health, /metrics and
  /internal/* needs `Authorization: Bearer <one of keys>`, or `x-api-key: <one of keys>` as
  Anthropic's clients send it (401 otherwise). The key a request authenticated with names its
  tenant, "key-<i>" for the i-th configured key (counted from 0 over every --api-key value,
  comma-separated ones included), written into the ASGI scope for the route to put into the
  request's RequestContext (tandem.api.request_context). Without keys the tenant is None.
- the cluster (tandem/cluster_secret.py): /internal/* routes accept only the cluster secret, in
  `x-tandem-cluster-secret: SECRET` or `Authorization: Bearer SECRET`. A tenant key or account
  token there is 403, anything else 401. With no secret configured, /internal/* routes are open
  while no key and no accounts are configured either (a lone `tandem serve`, tests: today's
  behaviour), and closed to everyone once they are (a tenant key is 403, nothing opens them):
  tenant keys never open them.
Every comparison runs in constant time (hmac.compare_digest), against every key.

What a tenant creates (files, batches, queued requests, stored responses, subscriptions) is its
own: routes pass `owner_of(scope)` to the stores, which answer another tenant's ids as absent
(404, the same as an id that never existed). Without keys every caller is one tenant, the
anonymous one.

Account tokens (tandem/accounts; on with --accounts, `accounts` below): a token `tdm_...` in the
same headers authenticates as its account, which is its tenant (the account id: stable, unlike
"key-<i>"). Then every credential is checked against the route (tandem/api/scopes.py):
- the route's scope: a token has the scopes it was created with, an --api-key ai:run and
  ai:batch (never admin); missing it is 403;
- /client/v4/accounts/{account_id}/...: a token's own account only (403 in Cloudflare's envelope
  otherwise); an --api-key may name any account, as before accounts existed;
- /admin/*: a token with the admin scope (an operator), or the cluster secret.
A token that no longer authenticates (revoked, expired, its account disabled) is 401 naming the
reason; an unknown or malformed one the plain 401 of a wrong key.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from tandem import cluster_secret
from tandem.accounts.model import API_KEY_SCOPES, CLUSTER, Credential
from tandem.accounts.service import Accounts
from tandem.api import scopes
from tandem.api.errors import error_response_for_path
from tandem.asyncq.job import ANONYMOUS
from tandem.errors import Forbidden, TandemError, Unauthorized

OPEN_PATHS = ("/health", "/livez", "/metrics")
INTERNAL_PREFIX = "/internal"
TENANT_SCOPE_KEY = "tandem.tenant"   # the scope's extension key (ASGI scopes may carry extra keys)
CREDENTIAL_SCOPE_KEY = "tandem.credential"   # the request's Credential (tandem/accounts/model.py)


def tenant_of(scope: Scope) -> str | None:
    return scope.get(TENANT_SCOPE_KEY)


def credential_of(scope: Scope) -> Credential | None:
    return scope.get(CREDENTIAL_SCOPE_KEY)


def owner_of(scope: Scope) -> str:
    """The tenant owning what the request creates and reads in the queue's store: its key's
    tenant, or ANONYMOUS ("") on a server without keys."""
    return tenant_of(scope) or ANONYMOUS


def is_internal(path: str, prefix: str = INTERNAL_PREFIX) -> bool:
    """An /internal route (leading slashes collapsed, as some routers would)."""
    path = "/" + path.lstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


class BearerAuth:
    """Tenant keys and account tokens on the API routes, the cluster secret on /internal/*;
    /health and /metrics stay open. Installed when keys, accounts or a secret are configured
    (tandem.api.app.build_app)."""

    def __init__(self, app: ASGIApp, keys: Sequence[str], cluster_secret: str | None = None,
                 accounts: Accounts | None = None) -> None:
        self.app = app
        self.keys = [k.encode() for k in keys]
        self.secret = cluster_secret
        self.accounts = accounts

    @staticmethod
    def presented(scope: Scope) -> bytes | None:
        """The credential the request carries (`Authorization: Bearer KEY`, or Anthropic's
        `x-api-key: KEY`); None for none."""
        headers = scope["headers"]
        value = next((v for k, v in headers if k == b"authorization"), b"")
        scheme, _, token = value.partition(b" ")
        if scheme.lower() != b"bearer":
            token = next((v for k, v in headers if k == b"x-api-key"), b"")
            if not token:
                return None
        return token.strip()

    def key_index(self, scope: Scope) -> int | None:
        """Which configured key the request carries; None for none."""
        token = self.presented(scope)
        if token is None:
            return None
        # Compare with every key (no early exit) so timing reveals nothing.
        hits = [hmac.compare_digest(token, k) for k in self.keys]
        return hits.index(True) if any(hits) else None

    def presents_secret(self, scope: Scope) -> bool:
        """`x-tandem-cluster-secret: SECRET` or `Authorization: Bearer SECRET` (both compared)."""
        scheme, _, token = (_header(scope, b"authorization") or b"").partition(b" ")
        in_header = cluster_secret.matches(_header(scope, cluster_secret.HEADER.encode()), self.secret)
        as_bearer = scheme.lower() == b"bearer" and cluster_secret.matches(token.strip(), self.secret)
        return in_header or as_bearer

    def internal_refusal(self, scope: Scope) -> TandemError | None:
        """Why an /internal request is refused (None: the cluster, or nothing is configured)."""
        if self.secret is None and not self.keys and self.accounts is None:
            return None
        if self.secret is not None and self.presents_secret(scope):
            return None
        if self.key_index(scope) is not None:
            return Forbidden("tenant API keys do not open /internal routes: they take the cluster "
                             "secret (--cluster-secret) in the 'x-tandem-cluster-secret' header")
        if self.secret is None:
            return Unauthorized("/internal routes are closed: this server has API keys or "
                                "accounts but no --cluster-secret")
        return Unauthorized("missing or invalid cluster secret; /internal routes take the cluster "
                            "secret in 'x-tandem-cluster-secret: <secret>' "
                            "(or 'Authorization: Bearer <secret>')")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if is_internal(scope["path"]):
            refusal = self.internal_refusal(scope)
            if isinstance(refusal, Unauthorized) and await self.is_account_token(scope):
                refusal = Forbidden("API tokens do not open /internal routes: they take the cluster "
                                    "secret (--cluster-secret) in the 'x-tandem-cluster-secret' header")
            if refusal is not None:
                await error_response_for_path(scope["path"], refusal)(scope, receive, send)
                return
            await self.app(scope, receive, send)   # the cluster: no tenant
            return
        if not self.keys and self.accounts is None:
            # no tenants to tell apart; operators' /admin/* routes follow the /internal rule
            refusal = self.internal_refusal(scope) if scopes.is_admin(scopes.route_path(scope)) else None
            if refusal is not None:
                await error_response_for_path(scope["path"], refusal)(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        try:
            credential = await self.credential(scope)
            self.check_route(scope, credential)
        except TandemError as err:
            await error_response_for_path(scope["path"], err)(scope, receive, send)
            return
        scope[TENANT_SCOPE_KEY] = credential.tenant
        scope[CREDENTIAL_SCOPE_KEY] = credential
        await self.app(scope, receive, send)

    async def credential(self, scope: Scope) -> Credential:
        """Who the request is: an --api-key's tenant, an account token's, or the cluster on
        /admin; Unauthorized otherwise."""
        index = self.key_index(scope)
        if index is not None:
            return Credential(tenant=f"key-{index}", scopes=API_KEY_SCOPES)
        if scopes.is_admin(scopes.route_path(scope)) and self.secret is not None \
                and self.presents_secret(scope):
            return CLUSTER
        token = self.presented(scope)
        if self.accounts is not None and token:
            credential = await self.accounts.authenticate(token.decode("latin-1"))
            if credential is not None:
                return credential
        raise Unauthorized("missing or invalid API key; send 'Authorization: Bearer <key>' "
                           "(or 'x-api-key: <key>')")

    async def is_account_token(self, scope: Scope) -> bool:
        """Whether the request carries a valid account token (to answer it 403, not 401)."""
        token = self.presented(scope)
        if self.accounts is None or not token:
            return False
        try:
            return await self.accounts.authenticate(token.decode("latin-1")) is not None
        except TandemError:
            return False

    @staticmethod
    def check_route(scope: Scope, credential: Credential) -> None:
        """Forbidden unless the credential opens this route (tandem/api/scopes.py)."""
        path = scopes.route_path(scope)
        named = scopes.path_account(path)
        if named is not None and credential.account is not None and named != credential.account:
            raise Forbidden(f"Authentication error: this API token is not valid for account {named}")
        needed = scopes.required_scope(path, scope.get("query_string", b""))
        if needed is None or needed in credential.scopes:
            return
        if needed == "admin":
            raise Forbidden("/admin routes take a token with the admin scope (an operator's) or the "
                            "cluster secret; tenant API keys and tokens without it do not open them")
        raise Forbidden(f"this API token lacks the scope '{needed}', which {scope['method']} {path} needs")
