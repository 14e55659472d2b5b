"""Accounts, their API tokens, scopes, and what a request authenticated as. Plain data, no I/O.

An account is a tenant: what its tokens create (files, batches, queued requests, stored
responses, subscriptions) is stored under its id, and its requests' KV is its own
(RequestContext.tenant is the account id). A token belongs to one account and has a name,
scopes and an optional expiry; its secret is shown once, when it is created, and stored only as
a salted hash (token_format.py). Times are Unix seconds of the host that made the change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tandem.errors import InvalidRequest, TandemError

SCOPE_RUN = "ai:run"        # /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, Workers AI run
SCOPE_BATCH = "ai:batch"    # /v1/files, /v1/batches, Workers AI queued requests, batch events, subscriptions
SCOPE_ADMIN = "admin"       # /admin/*: accounts and tokens
SCOPES = (SCOPE_RUN, SCOPE_BATCH, SCOPE_ADMIN)
DEFAULT_SCOPES = (SCOPE_RUN, SCOPE_BATCH)
# what an --api-key opens: everything a tenant does, no administration
API_KEY_SCOPES = frozenset(DEFAULT_SCOPES)

# Account ids appear in Workers AI paths and as tenants. "key-" is taken by --api-key tenants
# ("key-<i>", tandem/api/auth.py), so an account can never be one of them.
_ACCOUNT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
RESERVED_PREFIX = "key-"
MAX_NAME = 200


class AccountNotFound(TandemError):
    status = 404
    code = "not_found"


class TokenNotFound(TandemError):
    status = 404
    code = "not_found"


class AccountExists(TandemError):
    status = 409
    code = "conflict"


@dataclass(frozen=True)
class Account:
    id: str
    name: str
    created_at: float
    disabled_at: float | None = None

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None


@dataclass(frozen=True)
class Token:
    """A token as listed: never its secret."""
    id: str                       # the key id in the token's text (token_format.py)
    account_id: str
    name: str
    scopes: tuple[str, ...]
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None

    def status(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


@dataclass(frozen=True)
class StoredToken:
    """A token's row: the token and its salted hash."""
    token: Token
    salt: str
    digest: str


@dataclass(frozen=True)
class NewToken:
    token: Token
    text: str                     # the whole token (tdm_...): shown to its creator once, kept nowhere


@dataclass(frozen=True)
class Credential:
    """What a request authenticated as, put in its ASGI scope (tandem/api/auth.py)."""
    tenant: str | None            # owner of what it creates; None: nobody authenticated (no auth)
    scopes: frozenset[str]
    account: str | None = None    # the token's account; None: an --api-key or the cluster secret
    token_id: str | None = None

    @property
    def is_cluster(self) -> bool:
        return self.tenant is None and self.account is None and SCOPE_ADMIN in self.scopes


CLUSTER = Credential(tenant=None, scopes=frozenset({SCOPE_ADMIN}))


def check_account_id(account_id: str) -> str:
    if not isinstance(account_id, str) or not _ACCOUNT_ID.fullmatch(account_id) \
            or account_id.startswith(RESERVED_PREFIX):
        raise InvalidRequest(f"account id {account_id!r}: 1 to 64 letters, digits, '_', '.' or "
                             f"'-', starting with a letter or digit, not with {RESERVED_PREFIX!r}",
                             param="id")
    return account_id


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME \
            or not name.isprintable():
        raise InvalidRequest(f"{what} name: give 1 to {MAX_NAME} printable characters", param="name")
    return name.strip()


def check_scopes(scopes) -> tuple[str, ...]:
    if isinstance(scopes, str) or not isinstance(scopes, (list, tuple)) or not scopes \
            or not all(isinstance(s, str) for s in scopes):
        raise InvalidRequest(f"scopes: give a non-empty list of {', '.join(SCOPES)}", param="scopes")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise InvalidRequest(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}",
                             param="scopes")
    return tuple(s for s in SCOPES if s in scopes)     # canonical order, no duplicates


def check_expires_in(expires_in) -> float | None:
    if expires_in is None:
        return None
    if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)) or not expires_in > 0 \
            or expires_in > 100 * 365 * 86400:
        raise InvalidRequest("expires_in: seconds until the token expires, a positive number "
                             "(at most 100 years), or null for no expiry", param="expires_in")
    return float(expires_in)


def _int(t: float | None) -> int | None:
    return None if t is None else int(t)


def account_view(a: Account) -> dict:
    """An account as the admin API and `tandem accounts --json` show it."""
    return {"object": "account", "id": a.id, "name": a.name, "created_at": _int(a.created_at),
            "disabled": a.disabled, "disabled_at": _int(a.disabled_at)}


def token_view(t: Token, now: float) -> dict:
    """A token as listed: never its secret."""
    return {"object": "api_token", "id": t.id, "account_id": t.account_id, "name": t.name,
            "scopes": list(t.scopes), "status": t.status(now), "created_at": _int(t.created_at),
            "expires_at": _int(t.expires_at), "revoked_at": _int(t.revoked_at)}


def new_token_view(new: NewToken, now: float) -> dict:
    """A token just created, with its text: the only time anyone sees it."""
    return {**token_view(new.token, now), "token": new.text}
