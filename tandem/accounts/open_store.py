"""Open the account store in the queue's database, named as the queue's target is
(tandem/asyncq/open_queue.py): a file path or `sqlite:///PATH` (SQLite), `postgresql://...`,
`redis://...`. The store opens its own connection beside the queue's."""

from __future__ import annotations

from tandem.accounts.sql_store import SqlAccounts
from tandem.accounts.store import AccountStore
from tandem.asyncq.sqlite_queue import open_sqlite_db


def open_account_store(target: str) -> AccountStore:
    """Blocking (connects, creates the tables): call it off the event loop. Backends are imported
    only when named, so SQLite needs neither redis nor psycopg."""
    if target.startswith(("redis://", "rediss://", "unix://")):
        from tandem.accounts.redis_store import RedisAccounts  # lazy: see tests/test_import_graph.py
        return AccountStore(RedisAccounts(target))
    if target.startswith(("postgresql://", "postgres://")):
        from tandem.asyncq.postgres_queue import open_postgres_db  # lazy: see tests/test_import_graph.py
        return AccountStore(SqlAccounts(open_postgres_db(target)))
    if "://" in target and not target.startswith("sqlite:///"):
        raise ValueError(f"unknown store URL {target!r}: use a file path, sqlite:///PATH, "
                         "redis://HOST:PORT[/DB] or postgresql://USER@HOST:PORT/DB")
    return AccountStore(SqlAccounts(open_sqlite_db(target.removeprefix("sqlite://"))))
