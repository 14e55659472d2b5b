"""A presented API token -> the credential it carries, cheaply enough for every request.

Lookups by key id are cached in this process for `ttl_s` seconds (found or not), at most
`max_entries` of them (least recently used dropped first), and concurrent misses for one key id
share one lookup. Hence the staleness bound: a token revoked, or an account disabled, through
another gateway or the CLI stops authenticating on this one within `ttl_s` (5 s by default);
through this process's admin API at once (`forget_token`, `forget_account`). Expiry is checked on
every use against the cached expiry time, so it is exact. The secret is checked on every use too
(HMAC-SHA256 and a constant-time comparison, token_format.py): a cached entry holds the hash,
never a verdict about a text.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tandem.accounts import token_format
from tandem.accounts.model import Account, Credential, StoredToken
from tandem.errors import Unauthorized

Found = tuple[StoredToken, Account] | None
Lookup = Callable[[str], Awaitable[Found]]


@dataclass
class _Entry:
    found: Found
    until: float          # monotonic time the entry expires


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


class TokenResolver:
    def __init__(self, lookup: Lookup, ttl_s: float = 5.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._lookup = lookup
        self.ttl_s = ttl_s
        self._max = max_entries
        self._clock = clock
        self._wall = wall
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._pending: dict[str, asyncio.Future] = {}
        self._forgets = 0     # a lookup under way when something is forgotten is not cached
        self.lookups = 0      # store lookups made (tests read it)

    async def authenticate(self, text: str) -> Credential | None:
        """The credential of a valid token; None for anything that is not one of the store's
        tokens (unknown, malformed, wrong secret: the caller's plain 401). Unauthorized naming
        the reason for a real token that no longer authenticates: revoked, expired, or its
        account disabled."""
        parsed = token_format.parse(text)
        if parsed is None:
            return None
        key_id, secret = parsed
        found = await self._find(key_id)
        if found is None:
            return None
        row, account = found
        if not token_format.verify(secret, row.salt, row.digest):
            return None
        token = row.token
        if token.revoked_at is not None:
            raise Unauthorized(f"API token {token.id} was revoked")
        if account.disabled:
            raise Unauthorized(f"the account of API token {token.id} is disabled")
        if token.expires_at is not None and token.expires_at <= self._wall():
            raise Unauthorized(f"API token {token.id} expired at {_when(token.expires_at)}")
        return Credential(tenant=account.id, scopes=frozenset(token.scopes), account=account.id,
                          token_id=token.id)

    async def _find(self, key_id: str) -> Found:
        entry = self._cache.get(key_id)
        if entry is not None and entry.until > self._clock():
            self._cache.move_to_end(key_id)
            return entry.found
        pending = self._pending.get(key_id)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key_id))
            self._pending[key_id] = pending
        return await asyncio.shield(pending)

    async def _load(self, key_id: str) -> Found:
        forgets = self._forgets
        try:
            self.lookups += 1
            found = await self._lookup(key_id)
        finally:
            self._pending.pop(key_id, None)
        if forgets != self._forgets:   # it may predate the revocation: use it once, keep nothing
            return found
        self._cache[key_id] = _Entry(found, self._clock() + self.ttl_s)
        self._cache.move_to_end(key_id)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return found

    def forget_token(self, token_id: str) -> None:
        self._forgets += 1
        self._cache.pop(token_id, None)

    def forget_account(self, account_id: str) -> None:
        self._forgets += 1
        for key_id in [k for k, e in self._cache.items()
                       if e.found is not None and e.found[1].id == account_id]:
            del self._cache[key_id]
