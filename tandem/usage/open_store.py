"""Open the usage store in the database the queue's setting names (tandem/asyncq/open_queue.py's
forms): a file path or `sqlite:///PATH`, `redis://...`, or `postgresql://...`."""

from __future__ import annotations

import os
import sqlite3

from tandem.asyncq.sql_db import SqlDb
from tandem.asyncq.sqlite_queue import SQLITE
from tandem.usage.sql_store import SqlUsageStore
from tandem.usage.store import UsageStore


def open_store(target: str) -> UsageStore:
    """Backends are imported only when named, as the queue's are."""
    if target.startswith(("redis://", "rediss://", "unix://")):
        from tandem.usage.redis_store import RedisUsageStore  # lazy: see tests/test_import_graph.py
        return RedisUsageStore(target)
    if target.startswith(("postgresql://", "postgres://")):
        import psycopg  # only a PostgreSQL store loads psycopg

        from tandem.asyncq.postgres_queue import POSTGRES  # lazy: see tests/test_import_graph.py
        return SqlUsageStore(SqlDb(lambda: psycopg.connect(target, autocommit=True), POSTGRES))
    if "://" in target and not target.startswith("sqlite:///"):
        raise ValueError(f"unknown database URL {target!r}: use a file path, sqlite:///PATH, "
                         "redis://HOST:PORT[/DB] or postgresql://USER@HOST:PORT/DB")
    return open_sqlite_store(target.removeprefix("sqlite://"))


def open_sqlite_store(path: str, busy_timeout_s: float = 10.0) -> SqlUsageStore:
    """A connection of its own, `synchronous=NORMAL`: in WAL mode a commit survives the process's
    crash (not a power loss) without an fsync per request on the request's path."""
    if path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return SqlUsageStore(SqlDb(connect, SQLITE))
