"""Which scope each route group needs, and which account a Workers AI path names (the rules
tandem/api/auth.py applies to every credential: account tokens and --api-key keys alike).

- ai:run: POST /v1/chat/completions, /v1/completions, /v1/responses (and GET/DELETE of a stored
  response), /v1/messages (and count_tokens), Workers AI's /client/v4/accounts/{id}/ai/run/{model}.
- ai:batch: /v1/files..., /v1/batches..., Workers AI's run with ?queueRequest=true,
  /client/v4/accounts/{id}/ai/batches/..., /client/v4/accounts/{id}/event_subscriptions/...
- admin: /admin/... (accounts and tokens, tandem/api/admin/admin_api.py).
- none (any valid credential): everything else (/v1/models, /tokenize, /detokenize, /version, ...);
  /health and /metrics need no credential at all, /internal/* the cluster secret.
A new route that runs the model or touches queued work belongs in one of the groups here.
"""

from __future__ import annotations

from starlette.datastructures import QueryParams

from tandem.accounts.model import SCOPE_ADMIN, SCOPE_BATCH, SCOPE_RUN

_RUN_PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"}
_RUN_PREFIXES = ("/v1/responses/", "/v1/messages/")
_BATCH_PATHS = {"/v1/files", "/v1/batches"}
_BATCH_PREFIXES = ("/v1/files/", "/v1/batches/")
ADMIN_PREFIX = "/admin"
_ACCOUNTS = ["client", "v4", "accounts"]


def route_path(scope) -> str:
    """The path the router matches (Starlette's get_route_path): the ASGI path less a root_path
    the server was mounted under, so that a rule here sees what routing sees."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path != root and path[len(root)] == "/":
        return path[len(root):]
    return path


def _normal(path: str) -> str:
    return "/" + path.lstrip("/")   # leading slashes collapsed, as tandem.api.auth.is_internal


def is_admin(path: str) -> bool:
    path = _normal(path)
    return path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")


def path_account(path: str) -> str | None:
    """The account a /client/v4/accounts/{account_id}/... path names; None for other paths."""
    parts = _normal(path).split("/")
    return parts[4] if parts[1:4] == _ACCOUNTS and len(parts) > 4 and parts[4] else None


def required_scope(path: str, query_string: bytes = b"") -> str | None:
    """The scope a request to `path` needs; None: any valid credential will do."""
    path = _normal(path)
    if is_admin(path):
        return SCOPE_ADMIN
    if path in _RUN_PATHS or path.startswith(_RUN_PREFIXES):
        return SCOPE_RUN
    if path in _BATCH_PATHS or path.startswith(_BATCH_PREFIXES):
        return SCOPE_BATCH
    if path_account(path) is not None:
        rest = path.split("/")[5:]
        if rest[:2] == ["ai", "run"]:
            # the same test as the route's (tandem/api/workers_ai/workers_ai_api.py)
            queued = QueryParams(query_string).get("queueRequest", "").lower() == "true"
            return SCOPE_BATCH if queued else SCOPE_RUN
        if rest[:2] == ["ai", "batches"] or rest[:1] == ["event_subscriptions"]:
            return SCOPE_BATCH
    return None
