"""Accounts on SQL (SQLite or PostgreSQL through asyncq's `SqlDb`), in the queue's database:
two tables beside the queue's, each change one transaction. A token's scopes are stored as
comma-separated text."""

from __future__ import annotations

from tandem.accounts.model import Account, StoredToken, Token
from tandem.asyncq.sql_db import SqlDb, Tx

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tandem_accounts (
        id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        disabled_at DOUBLE PRECISION)""",
    """CREATE TABLE IF NOT EXISTS tandem_account_tokens (
        id TEXT PRIMARY KEY, account_id TEXT NOT NULL, name TEXT NOT NULL, scopes TEXT NOT NULL,
        salt TEXT NOT NULL, digest TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION, revoked_at DOUBLE PRECISION)""",
    "CREATE INDEX IF NOT EXISTS tandem_account_tokens_account "
    "ON tandem_account_tokens (account_id, created_at)",
)

_ACCOUNT = "id, name, created_at, disabled_at"
_TOKEN = "id, account_id, name, scopes, created_at, expires_at, revoked_at"


def _opt(value) -> float | None:
    return None if value is None else float(value)


def _account(row: tuple) -> Account:
    return Account(id=row[0], name=row[1], created_at=float(row[2]), disabled_at=_opt(row[3]))


def _token(row: tuple) -> Token:
    return Token(id=row[0], account_id=row[1], name=row[2], scopes=tuple(row[3].split(",")),
                 created_at=float(row[4]), expires_at=_opt(row[5]), revoked_at=_opt(row[6]))


class SqlAccounts:
    """An `AccountBackend` (store.py) on one SQL connection."""

    def __init__(self, db: SqlDb) -> None:
        self._db = db
        db.script(SCHEMA)

    async def insert_account(self, a: Account) -> bool:
        return await self._db.transact(lambda tx: bool(tx.rows(
            f"INSERT INTO tandem_accounts ({_ACCOUNT}) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id) DO NOTHING RETURNING id", (a.id, a.name, a.created_at, a.disabled_at))))

    async def get_account(self, account_id: str) -> Account | None:
        rows = await self._db.transact(lambda tx: tx.rows(
            f"SELECT {_ACCOUNT} FROM tandem_accounts WHERE id = ?", (account_id,)))
        return _account(rows[0]) if rows else None

    async def list_accounts(self) -> list[Account]:
        rows = await self._db.transact(lambda tx: tx.rows(
            f"SELECT {_ACCOUNT} FROM tandem_accounts ORDER BY created_at, id"))
        return [_account(r) for r in rows]

    async def set_disabled(self, account_id: str, when: float | None) -> Account | None:
        rows = await self._db.transact(lambda tx: tx.rows(
            "UPDATE tandem_accounts SET disabled_at = " + ("COALESCE(disabled_at, ?)" if when is not None
                                                           else "NULL")
            + f" WHERE id = ? RETURNING {_ACCOUNT}", (when, account_id) if when is not None else (account_id,)))
        return _account(rows[0]) if rows else None

    async def insert_token(self, row: StoredToken) -> bool:
        return await self._db.transact(_insert_token, row)

    async def list_tokens(self, account_id: str) -> list[Token]:
        rows = await self._db.transact(lambda tx: tx.rows(
            f"SELECT {_TOKEN} FROM tandem_account_tokens WHERE account_id = ? ORDER BY created_at, id",
            (account_id,)))
        return [_token(r) for r in rows]

    async def revoke_token(self, account_id: str, token_id: str, when: float) -> Token | None:
        rows = await self._db.transact(lambda tx: tx.rows(
            "UPDATE tandem_account_tokens SET revoked_at = COALESCE(revoked_at, ?) "
            f"WHERE id = ? AND account_id = ? RETURNING {_TOKEN}", (when, token_id, account_id)))
        return _token(rows[0]) if rows else None

    async def find_token(self, token_id: str) -> tuple[StoredToken, Account] | None:
        rows = await self._db.transact(lambda tx: tx.rows(
            "SELECT " + ", ".join(f"t.{c.strip()}" for c in _TOKEN.split(","))
            + ", t.salt, t.digest, " + ", ".join(f"a.{c.strip()}" for c in _ACCOUNT.split(","))
            + " FROM tandem_account_tokens t JOIN tandem_accounts a ON a.id = t.account_id "
              "WHERE t.id = ?", (token_id,)))
        if not rows:
            return None
        r = rows[0]
        return StoredToken(_token(r[:7]), salt=r[7], digest=r[8]), _account(r[9:])

    async def close(self) -> None:
        await self._db.close()


def _insert_token(tx: Tx, row: StoredToken) -> bool:
    t = row.token
    if not tx.rows("SELECT id FROM tandem_accounts WHERE id = ? {FOR_UPDATE}", (t.account_id,)):
        return False
    tx.rows(f"INSERT INTO tandem_account_tokens ({_TOKEN}, salt, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (t.id, t.account_id, t.name, ",".join(t.scopes), t.created_at, t.expires_at, t.revoked_at,
             row.salt, row.digest))
    return True
