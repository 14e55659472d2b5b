"""Open the queue a setting names: a file path (SQLite, the default), `sqlite:///PATH`,
`redis://...` / `rediss://...`, or `postgresql://...` / `postgres://...`."""

from __future__ import annotations

from tandem.asyncq.queue import JobQueue
from tandem.asyncq.sqlite_queue import open_sqlite_queue


def open_queue(target: str) -> JobQueue:
    """Backends are imported only when named, so SQLite needs neither redis nor psycopg."""
    if target.startswith(("redis://", "rediss://", "unix://")):
        from tandem.asyncq.redis_queue import RedisQueue  # lazy: see tests/test_import_graph.py
        return RedisQueue(target)
    if target.startswith(("postgresql://", "postgres://")):
        from tandem.asyncq.postgres_queue import open_postgres_queue  # lazy: see tests/test_import_graph.py
        return open_postgres_queue(target)
    if "://" in target and not target.startswith("sqlite:///"):
        raise ValueError(f"unknown queue URL {target!r}: use a file path, sqlite:///PATH, "
                         "redis://HOST:PORT[/DB] or postgresql://USER@HOST:PORT/DB")
    return open_sqlite_queue(target.removeprefix("sqlite://"))
