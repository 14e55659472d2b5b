"""The default backend: a SQLite file in WAL mode (stdlib sqlite3), shared by every process on
this host that opens the same file (BEGIN IMMEDIATE makes their write transactions serial)."""

from __future__ import annotations

import os
import sqlite3
import time

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
        # Switching a new file to WAL takes an exclusive lock without waiting on the busy
        # handler: two connections opening one new file at once (the queue's and the
        # accounts') would fail it. Retry within the busy timeout instead.
        deadline = time.monotonic() + busy_timeout_s
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(0.01)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        return conn

    return SqlDb(connect, SQLITE)


def open_sqlite_queue(path: str, busy_timeout_s: float = 10.0, synchronous: str = "FULL") -> SqlQueue:
    return SqlQueue(open_sqlite_db(path, busy_timeout_s, synchronous))
