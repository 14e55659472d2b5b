"""One SQL connection driven from one thread, with the few things SQLite and PostgreSQL write
differently (a `Dialect`), so that the queue's logic (sql_queue.py) is written once.

Every call runs a whole transaction in the connection's own thread: the event loop never blocks
on the database, and the connection is never used by two threads.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Dialect:
    name: str
    begin: str                       # starts a write transaction ("BEGIN IMMEDIATE" takes SQLite's write lock now)
    for_update: str                  # appended to a SELECT of rows the transaction will change
    skip_locked: str                 # the same, skipping rows another transaction has locked
    placeholder: str                 # "?" (sqlite3) or "%s" (psycopg)
    now_sql: str | None              # the server's clock; None: this host's
    retryable: Callable[[BaseException], bool]   # errors after which the transaction is run again
    schema_lock: str = ""            # run first in the DDL transaction: serialises processes creating
                                     # the schema at once ("" where `begin` already does)


class Tx:
    """A transaction in progress: `rows(sql, params)` with `?` placeholders; `now` is read once."""

    def __init__(self, cursor: Any, dialect: Dialect) -> None:
        self._cur = cursor
        self._dialect = dialect
        self.now = self._read_now()

    def _read_now(self) -> float:
        if self._dialect.now_sql is None:
            return time.time()
        self._cur.execute(self._dialect.now_sql)
        return float(self._cur.fetchone()[0])

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        if self._dialect.placeholder != "?":
            sql = sql.replace("?", self._dialect.placeholder)
        sql = sql.replace("{SKIP_LOCKED}", self._dialect.skip_locked)
        sql = sql.replace("{FOR_UPDATE}", self._dialect.for_update)
        self._cur.execute(sql, tuple(params))
        return list(self._cur.fetchall()) if self._cur.description else []

    def rowcount(self) -> int:
        return self._cur.rowcount


def _rollback(cur: Any) -> None:
    try:
        cur.execute("ROLLBACK")
    except Exception:  # no transaction was open (BEGIN itself failed)
        pass


class SqlDb:
    def __init__(self, connect: Callable[[], Any], dialect: Dialect, max_tries: int = 5) -> None:
        self.dialect = dialect
        self._max_tries = max_tries
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"asyncq-{dialect.name}")
        self._conn = self._pool.submit(connect).result()

    async def transact(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._transact_sync, fn, args)

    def _transact_sync(self, fn: Callable[..., T], args: tuple) -> T:
        for attempt in range(self._max_tries):
            cur = self._conn.cursor()
            try:
                cur.execute(self.dialect.begin)
                out = fn(Tx(cur, self.dialect), *args)
                cur.execute("COMMIT")
                return out
            except Exception as exc:
                _rollback(cur)
                if not self.dialect.retryable(exc) or attempt == self._max_tries - 1:
                    raise
                time.sleep(0.01 * 2 ** attempt)
            finally:
                cur.close()
        raise AssertionError("unreachable")

    def script(self, statements: Sequence[str]) -> None:
        """Run DDL at open, in the connection's thread, one transaction. Several processes may open
        one store at once: PostgreSQL's CREATE ... IF NOT EXISTS is not safe against a concurrent
        creator (both see no table, the loser fails on the catalog's unique index), so the
        dialect's `schema_lock` makes the creators take turns."""
        def run() -> None:
            cur = self._conn.cursor()
            try:
                cur.execute(self.dialect.begin)
                if self.dialect.schema_lock:
                    cur.execute(self.dialect.schema_lock)
                for stmt in statements:
                    cur.execute(stmt)
                cur.execute("COMMIT")
            except Exception:
                _rollback(cur)
                raise
            finally:
                cur.close()
        self._pool.submit(run).result()

    def add_missing_columns(self, columns: Sequence[tuple[str, str, str]]) -> None:
        """At open: ALTER TABLE ... ADD COLUMN for each (table, column, type) the table lacks
        (SQLite has no ADD COLUMN IF NOT EXISTS). Two processes opening an old store at once:
        the loser's ALTER fails on the duplicate column, which is what it wanted anyway."""
        def run() -> None:
            cur = self._conn.cursor()
            try:
                for table, column, kind in columns:
                    cur.execute(f"SELECT * FROM {table} LIMIT 0")
                    if column in {d[0] for d in cur.description}:
                        continue
                    try:
                        cur.execute(self.dialect.begin)
                        if self.dialect.schema_lock:
                            cur.execute(self.dialect.schema_lock)
                        cur.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                        cur.execute("COMMIT")
                    except Exception:
                        _rollback(cur)
                        cur.execute(f"SELECT * FROM {table} LIMIT 0")
                        if column not in {d[0] for d in cur.description}:
                            raise
            finally:
                cur.close()
        self._pool.submit(run).result()

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._conn.close)
        self._pool.shutdown(wait=True)
