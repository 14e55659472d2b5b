"""Open the usage store in the database the queue's setting names (tandem/asyncq/open_queue.py's
forms): a file path or `sqlite:///PATH`, `redis://...`, or `postgresql://...`."""

from __future__ import annotations

from tandem.asyncq.sqlite_queue import open_sqlite_db
from tandem.usage.sql_store import SqlUsageStore
from tandem.usage.store import UsageStore


def open_store(target: str) -> UsageStore:
    """Backends are imported only when named, as the queue's are."""
    if target.startswith(("redis://", "rediss://", "unix://")):
        from tandem.usage.redis_store import RedisUsageStore  # lazy: see tests/test_import_graph.py
        return RedisUsageStore(target)
    if target.startswith(("postgresql://", "postgres://")):
        from tandem.asyncq.postgres_queue import open_postgres_db  # lazy: see tests/test_import_graph.py
        return SqlUsageStore(open_postgres_db(target))
    if "://" in target and not target.startswith("sqlite:///"):
        raise ValueError(f"unknown database URL {target!r}: use a file path, sqlite:///PATH, "
                         "redis://HOST:PORT[/DB] or postgresql://USER@HOST:PORT/DB")
    return open_sqlite_store(target.removeprefix("sqlite://"))


def open_sqlite_store(path: str, busy_timeout_s: float = 10.0) -> SqlUsageStore:
    """A connection of its own beside the queue's and the accounts' (opening one new file at once
    is retried within the busy timeout: tandem/asyncq/sqlite_queue.py), `synchronous=NORMAL`: in
    WAL mode a commit survives the process's crash (not a power loss) without an fsync per request
    on the request's path."""
    return SqlUsageStore(open_sqlite_db(path, busy_timeout_s, synchronous="NORMAL"))
