"""PostgreSQL backend (psycopg 3): several gateways share one queue. Takers lock the rows they
lease with `SELECT ... FOR UPDATE SKIP LOCKED`, so two takers never wait on, or take, the same
job; times come from the server's clock, so the gateways' clocks do not matter."""

from __future__ import annotations

import psycopg
from psycopg import errors

from tandem.asyncq.sql_db import Dialect, SqlDb
from tandem.asyncq.sql_queue import SqlQueue


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (errors.DeadlockDetected, errors.SerializationFailure))


POSTGRES = Dialect(name="postgres", begin="BEGIN", for_update="FOR UPDATE",
                   skip_locked="FOR UPDATE SKIP LOCKED", placeholder="%s",
                   now_sql="SELECT extract(epoch FROM clock_timestamp())::float8",
                   retryable=_transient,
                   # a transaction-scoped advisory lock, released at COMMIT; the key is arbitrary
                   # but fixed, so every tandem process opening this database agrees on it
                   schema_lock="SELECT pg_advisory_xact_lock(7310254613)")


def open_postgres_db(url: str) -> SqlDb:
    """A connection to `url`: postgresql://user@host:port/dbname (libpq's connection URI)."""
    return SqlDb(lambda: psycopg.connect(url, autocommit=True), POSTGRES)


def open_postgres_queue(url: str) -> SqlQueue:
    return SqlQueue(open_postgres_db(url))
