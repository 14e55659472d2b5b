"""The usage store on SQL (SQLite or PostgreSQL, through the queue's `SqlDb`), on a connection of
its own to the queue's database.

Tables: `usage_windows` (key, window index, three counts; a key's windows before the previous
one are deleted as it is consumed) and `usage_ledger` (one row per recorded request, its key the
primary key: `INSERT ... ON CONFLICT DO NOTHING` makes recording idempotent; the ledger is the
GROUP BY of those rows). Atomicity of `consume`: SQLite's write transactions are serial (BEGIN
IMMEDIATE); on PostgreSQL the current window's row is created first (ON CONFLICT DO NOTHING
waits for a concurrent creator) and both rows are read FOR UPDATE in window order, so concurrent
admissions of one key take turns and never deadlock.
"""

from __future__ import annotations

import math

from tandem.asyncq.sql_db import SqlDb, Tx
from tandem.usage.limits import Limit
from tandem.usage.pricing import TokenUsage
from tandem.usage.store import LedgerRow, Reconcile, UsageEntry
from tandem.usage.window import Counts, WindowState, fits

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS usage_windows (
        key TEXT NOT NULL, idx BIGINT NOT NULL, requests BIGINT NOT NULL,
        input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL, PRIMARY KEY (key, idx))""",
    """CREATE TABLE IF NOT EXISTS usage_ledger (
        request_key TEXT PRIMARY KEY, account TEXT NOT NULL, model TEXT NOT NULL,
        day TEXT NOT NULL, kind TEXT NOT NULL, input_uncached BIGINT NOT NULL,
        input_cached BIGINT NOT NULL, output BIGINT NOT NULL,
        recorded_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS usage_ledger_account_day ON usage_ledger (account, day)",
    "CREATE INDEX IF NOT EXISTS usage_ledger_day ON usage_ledger (day)",
)


class SqlUsageStore:
    """A `UsageStore` (tandem/usage/store.py) on one SQL connection."""

    def __init__(self, db: SqlDb) -> None:
        self._db = db
        db.script(SCHEMA)

    async def consume(self, key: str, cost: Counts, limit: Limit, window_s: float,
                      now: float | None = None) -> WindowState:
        return await self._db.transact(_consume, key, cost, limit, window_s, now)

    async def settle(self, reconcile: Reconcile | None, entry: UsageEntry | None) -> bool:
        if reconcile is None and entry is None:
            return False
        return await self._db.transact(_settle, reconcile, entry)

    async def ledger(self, account: str | None, since: str, until: str) -> list[LedgerRow]:
        return await self._db.transact(_ledger, account, since, until)

    async def close(self) -> None:
        await self._db.close()


def _consume(tx: Tx, key: str, cost: Counts, limit: Limit, window_s: float,
             now: float | None) -> WindowState:
    now = tx.now if now is None else now
    idx = math.floor(now / window_s)
    tx.rows("INSERT INTO usage_windows (key, idx, requests, input_tokens, output_tokens) "
            "VALUES (?, ?, 0, 0, 0) ON CONFLICT (key, idx) DO NOTHING", (key, idx))
    rows = tx.rows("SELECT idx, requests, input_tokens, output_tokens FROM usage_windows "
                   "WHERE key = ? AND idx IN (?, ?) ORDER BY idx {FOR_UPDATE}", (key, idx - 1, idx))
    found = {r[0]: Counts(int(r[1]), int(r[2]), int(r[3])) for r in rows}
    prev, cur = found.get(idx - 1, Counts()), found.get(idx, Counts())
    admitted = fits(limit, prev, cur, now - idx * window_s, cost, window_s)
    if admitted:
        cur = cur + cost
        tx.rows("UPDATE usage_windows SET requests = ?, input_tokens = ?, output_tokens = ? "
                "WHERE key = ? AND idx = ?",
                (cur.requests, cur.input_tokens, cur.output_tokens, key, idx))
    tx.rows("DELETE FROM usage_windows WHERE key = ? AND idx < ?", (key, idx - 1))
    return WindowState(now=now, index=idx, prev=prev, cur=cur, admitted=admitted, window_s=window_s)


def _settle(tx: Tx, reconcile: Reconcile | None, entry: UsageEntry | None) -> bool:
    if reconcile is not None:
        d = reconcile.delta
        tx.rows("UPDATE usage_windows SET requests = requests + ?, input_tokens = input_tokens + ?, "
                "output_tokens = output_tokens + ? WHERE key = ? AND idx = ?",
                (d.requests, d.input_tokens, d.output_tokens, reconcile.key, reconcile.index))
    if entry is None:
        return False
    u = entry.usage
    inserted = tx.rows(
        "INSERT INTO usage_ledger (request_key, account, model, day, kind, input_uncached, "
        "input_cached, output, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (request_key) DO NOTHING RETURNING request_key",
        (entry.key, entry.account, entry.model, entry.day, entry.kind, u.input_uncached,
         u.input_cached, u.output, tx.now))
    return bool(inserted)


def _ledger(tx: Tx, account: str | None, since: str, until: str) -> list[LedgerRow]:
    where, params = "day >= ? AND day <= ?", [since, until]
    if account is not None:
        where += " AND account = ?"
        params.append(account)
    rows = tx.rows("SELECT account, model, day, COUNT(*), SUM(input_uncached), SUM(input_cached), "
                   f"SUM(output) FROM usage_ledger WHERE {where} GROUP BY account, model, day "
                   "ORDER BY day, account, model", params)
    return [LedgerRow(account=r[0], model=r[1], day=r[2], requests=int(r[3]),
                      usage=TokenUsage(int(r[4]), int(r[5]), int(r[6]))) for r in rows]
