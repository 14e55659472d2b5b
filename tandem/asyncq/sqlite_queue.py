"""The default backend: a SQLite file in WAL mode (stdlib sqlite3), shared by every process on
this host that opens the same file (BEGIN IMMEDIATE makes their write transactions serial)."""

from __future__ import annotations

import os
import sqlite3

from tandem.asyncq.sql_db import Dialect, SqlDb
from tandem.asyncq.sql_queue import SqlQueue


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc))


SQLITE = Dialect(name="sqlite", begin="BEGIN IMMEDIATE", for_update="", skip_locked="",
                 placeholder="?", now_sql=None, retryable=_locked)


def open_sqlite_db(path: str, busy_timeout_s: float = 10.0, synchronous: str = "FULL") -> SqlDb:
    """A connection to the SQLite file `path` (created with its directory if absent), in WAL mode.
    `synchronous=FULL`: a committed transaction survives a power loss, not only a crash. Other
    stores kept in the queue's database (tandem/accounts) open their own connection with it."""
    if path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        return conn

    return SqlDb(connect, SQLITE)


def open_sqlite_queue(path: str, busy_timeout_s: float = 10.0, synchronous: str = "FULL") -> SqlQueue:
    return SqlQueue(open_sqlite_db(path, busy_timeout_s, synchronous))
