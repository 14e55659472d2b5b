"""The admin API: accounts and their API tokens, served with --accounts. Only an operator (a token
with the admin scope) or the cluster (its secret) gets here: tandem/api/auth.py refuses everyone
else (401, or 403 for a credential without the admin scope). JSON in and out; errors in OpenAI's
shape.

  POST   /admin/accounts                          {"name", "id"?}            -> account
  GET    /admin/accounts                                                     -> {"object": "list", "data": [account]}
  GET    /admin/accounts/{account_id}                                        -> account
  POST   /admin/accounts/{account_id}/disable     (its tokens stop working)  -> account
  POST   /admin/accounts/{account_id}/enable                                 -> account
  POST   /admin/accounts/{account_id}/tokens      {"name", "scopes"?, "expires_in"?}
                                                  -> token, with "token": its text, shown this once
  GET    /admin/accounts/{account_id}/tokens                                 -> {"object": "list", "data": [token]}
  DELETE /admin/accounts/{account_id}/tokens/{token_id}  (revokes it)        -> token

An account: {"object": "account", "id", "name", "created_at", "disabled", "disabled_at"}; a token:
{"object": "api_token", "id", "account_id", "name", "scopes", "status" (active, revoked, expired),
"created_at", "expires_at", "revoked_at"} (tandem/accounts/model.py). "scopes" defaults to
["ai:run", "ai:batch"]; "expires_in" is seconds (none: no expiry). Unknown accounts and tokens
are 404, an account id already taken 409, bad fields 400 naming the field. Disabling and revoking
take effect at once on this server, within the token cache's TTL on the others
(tandem/accounts/resolver.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tandem.accounts.model import DEFAULT_SCOPES, account_view, new_token_view, token_view
from tandem.accounts.service import Accounts
from tandem.api.errors import openai_error_response
from tandem.api.request_body import read_json_object
from tandem.api.responses import json_response
from tandem.errors import InvalidRequest

MAX_BODY = 64 * 1024
Handler = Callable[[Request], Awaitable[dict]]


def _fields(body: dict, allowed: tuple[str, ...]) -> dict:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(unknown)}; this route takes "
                             f"{', '.join(allowed)}", param=unknown[0])
    if "name" in allowed and "name" not in body:
        raise InvalidRequest("give a name", param="name")
    return body


def _listing(data: list[dict]) -> dict:
    return {"object": "list", "data": data}


def admin_routes(accounts: Accounts) -> list[Route]:
    def route(path: str, handler: Handler, method: str) -> Route:
        async def endpoint(request: Request) -> Response:
            try:
                return json_response(await handler(request))
            except Exception as exc:
                return openai_error_response(exc)
        return Route(path, endpoint, methods=[method])

    async def create_account(request: Request) -> dict:
        body = _fields(await read_json_object(request, MAX_BODY), ("name", "id"))
        return account_view(await accounts.store.create_account(body["name"], body.get("id")))

    async def list_accounts(request: Request) -> dict:
        return _listing([account_view(a) for a in await accounts.store.list_accounts()])

    async def get_account(request: Request) -> dict:
        return account_view(await accounts.store.get_account(request.path_params["account_id"]))

    async def disable(request: Request) -> dict:
        account_id = request.path_params["account_id"]
        account = await accounts.store.disable(account_id)
        accounts.resolver.forget_account(account_id)
        return account_view(account)

    async def enable(request: Request) -> dict:
        account_id = request.path_params["account_id"]
        account = await accounts.store.enable(account_id)
        accounts.resolver.forget_account(account_id)
        return account_view(account)

    async def create_token(request: Request) -> dict:
        body = _fields(await read_json_object(request, MAX_BODY), ("name", "scopes", "expires_in"))
        new = await accounts.store.create_token(request.path_params["account_id"], body["name"],
                                                body.get("scopes", list(DEFAULT_SCOPES)),
                                                body.get("expires_in"))
        return new_token_view(new, time.time())

    async def list_tokens(request: Request) -> dict:
        tokens = await accounts.store.list_tokens(request.path_params["account_id"])
        now = time.time()
        return _listing([token_view(t, now) for t in tokens])

    async def revoke(request: Request) -> dict:
        token_id = request.path_params["token_id"]
        token = await accounts.store.revoke_token(request.path_params["account_id"], token_id)
        accounts.resolver.forget_token(token_id)
        return token_view(token, time.time())

    base = "/admin/accounts"
    return [route(base, create_account, "POST"), route(base, list_accounts, "GET"),
            route(base + "/{account_id}", get_account, "GET"),
            route(base + "/{account_id}/disable", disable, "POST"),
            route(base + "/{account_id}/enable", enable, "POST"),
            route(base + "/{account_id}/tokens", create_token, "POST"),
            route(base + "/{account_id}/tokens", list_tokens, "GET"),
            route(base + "/{account_id}/tokens/{token_id}", revoke, "DELETE")]
