"""The account store: accounts and their tokens, over a backend that keeps rows (sql_store.py on
SQLite or PostgreSQL, redis_store.py on Redis). The rules live here, once for every backend:
ids, validation, token creation and hashing, which changes are refused.

Invariants (tests/accounts/test_store.py runs the same tests on every backend):
- An account id is unique; creating an existing one is AccountExists (409), changing nothing.
- A token belongs to exactly one account, which existed when it was made; its secret is
  returned once (NewToken.text) and only its salted hash is stored.
- A token of account A is never listed, revoked or found under account B (TokenNotFound, the
  same answer as an unknown token id).
- Revoking and disabling keep the first time they happened; enabling clears the account's.
  Nothing is deleted: a revoked token stays listed as revoked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from tandem.accounts import token_format
from tandem.accounts.model import (
    DEFAULT_SCOPES,
    Account,
    AccountExists,
    AccountNotFound,
    NewToken,
    StoredToken,
    Token,
    TokenNotFound,
    check_account_id,
    check_expires_in,
    check_name,
    check_scopes,
)


class AccountBackend(Protocol):
    """Rows, nothing else: every method is one atomic change or read."""

    async def insert_account(self, account: Account) -> bool: ...        # False: the id is taken
    async def get_account(self, account_id: str) -> Account | None: ...
    async def list_accounts(self) -> list[Account]: ...                  # by creation
    # disabled_at = COALESCE(disabled_at, when) for a time, NULL for None; None: no such account
    async def set_disabled(self, account_id: str, when: float | None) -> Account | None: ...
    async def insert_token(self, row: StoredToken) -> bool: ...          # False: no such account
    async def list_tokens(self, account_id: str) -> list[Token]: ...     # by creation
    # revoked_at = COALESCE(revoked_at, when) where the token is the account's; None: it is not
    async def revoke_token(self, account_id: str, token_id: str, when: float) -> Token | None: ...
    async def find_token(self, token_id: str) -> tuple[StoredToken, Account] | None: ...
    async def close(self) -> None: ...


class AccountStore:
    def __init__(self, backend: AccountBackend, clock: Callable[[], float] = time.time) -> None:
        self._b = backend
        self._clock = clock

    async def create_account(self, name: str, account_id: str | None = None) -> Account:
        """`account_id`: the id to give it (Workers AI paths name it); None: 32 random hex
        digits, the form of Cloudflare's account ids."""
        account = Account(id=uuid.uuid4().hex if account_id is None else check_account_id(account_id),
                          name=check_name(name, "account"), created_at=self._clock())
        if not await self._b.insert_account(account):
            raise AccountExists(f"account {account.id} exists", param="id")
        return account

    async def get_account(self, account_id: str) -> Account:
        account = await self._b.get_account(account_id)
        if account is None:
            raise AccountNotFound(f"no account {account_id}", param="account_id")
        return account

    async def list_accounts(self) -> list[Account]:
        return await self._b.list_accounts()

    async def disable(self, account_id: str) -> Account:
        """Every token of the account stops authenticating (within the resolver's TTL)."""
        return await self._set_disabled(account_id, self._clock())

    async def enable(self, account_id: str) -> Account:
        return await self._set_disabled(account_id, None)

    async def _set_disabled(self, account_id: str, when: float | None) -> Account:
        account = await self._b.set_disabled(account_id, when)
        if account is None:
            raise AccountNotFound(f"no account {account_id}", param="account_id")
        return account

    async def create_token(self, account_id: str, name: str,
                           scopes: Sequence[str] = DEFAULT_SCOPES,
                           expires_in: float | None = None) -> NewToken:
        name, scopes = check_name(name, "token"), check_scopes(list(scopes))
        expires_in = check_expires_in(expires_in)
        key_id, text, salt, digest = token_format.new_token()
        now = self._clock()
        token = Token(id=key_id, account_id=account_id, name=name, scopes=scopes, created_at=now,
                      expires_at=None if expires_in is None else now + expires_in)
        if not await self._b.insert_token(StoredToken(token, salt, digest)):
            raise AccountNotFound(f"no account {account_id}", param="account_id")
        return NewToken(token, text)

    async def list_tokens(self, account_id: str) -> list[Token]:
        await self.get_account(account_id)      # an unknown account is a 404, not an empty list
        return await self._b.list_tokens(account_id)

    async def revoke_token(self, account_id: str, token_id: str) -> Token:
        token = await self._b.revoke_token(account_id, token_id, self._clock())
        if token is None:
            raise TokenNotFound(f"no token {token_id} in account {account_id}", param="token_id")
        return token

    async def find_token(self, token_id: str) -> tuple[StoredToken, Account] | None:
        """The token with this key id and its account (the resolver's lookup)."""
        return await self._b.find_token(token_id)

    async def close(self) -> None:
        await self._b.close()
