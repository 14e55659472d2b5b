"""The accounts of one app (a gateway, or a standalone `tandem serve` with --accounts): the store
in the queue's database and the token resolver in front of it.

The store is opened on a thread from construction on (a new SQLite file costs ~50 ms, a
PostgreSQL connection a network round trip), like the queue's; `start()` waits for it, and no
request is served before the app's startup has run it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future, ThreadPoolExecutor

from tandem.accounts.model import Credential
from tandem.accounts.open_store import open_account_store
from tandem.accounts.resolver import Found, TokenResolver
from tandem.accounts.store import AccountStore
from tandem.errors import TandemError

log = logging.getLogger(__name__)


class AccountsUnavailable(TandemError):
    """The account store could not be read: no request can be authenticated by token (503)."""

    status = 503
    error_type = "server_error"
    code = "accounts_unavailable"


class Accounts:
    def __init__(self, target: str, ttl_s: float = 5.0) -> None:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accounts-open")
        try:
            self._opening: Future = pool.submit(open_account_store, target)
        finally:
            pool.shutdown(wait=False)
        self._store: AccountStore | None = None
        self.resolver = TokenResolver(self._find, ttl_s=ttl_s)

    @property
    def store(self) -> AccountStore:
        if self._store is None:
            raise RuntimeError("the account store is not open yet: Accounts.start() opens it")
        return self._store

    async def start(self) -> None:
        self._store = await asyncio.wrap_future(self._opening)

    async def stop(self) -> None:
        store = self._store if self._store is not None else await asyncio.wrap_future(self._opening)
        self._store = None
        await store.close()

    async def _find(self, token_id: str) -> Found:
        return await self.store.find_token(token_id)

    async def authenticate(self, text: str) -> Credential | None:
        """TokenResolver.authenticate; a store that cannot be read is a 503, never a 500."""
        try:
            return await self.resolver.authenticate(text)
        except TandemError:
            raise
        except Exception as exc:
            log.error("account store lookup failed", exc_info=exc)
            raise AccountsUnavailable("the account store cannot be read; try again") from exc
