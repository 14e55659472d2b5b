"""The SQL queue's tables (the same DDL runs on SQLite and PostgreSQL) and row -> value mapping.

JSON values are stored as text; times as Unix seconds (DOUBLE PRECISION). `tenant` is the
creator's (tandem/asyncq/job.py: ownership); rows stored before it existed read as ANONYMOUS ('').
A batch's `client_key` is its idempotency key scoped by its tenant (job.scoped), so the UNIQUE
(account, client_key) of stores made before tenants still holds one batch per tenant and key.
"""

from __future__ import annotations

import orjson

from tandem.asyncq.event import Delivery, DeliveryStatus, Event, EventType, Subscription
from tandem.asyncq.job import Batch, Job, JobStatus, unscoped

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS asyncq_batches (
        id TEXT PRIMARY KEY, account TEXT NOT NULL, model TEXT NOT NULL, client_key TEXT,
        priority INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL, total INTEGER NOT NULL,
        succeeded INTEGER NOT NULL, failed INTEGER NOT NULL, cancelled INTEGER NOT NULL,
        meta TEXT NOT NULL, tenant TEXT NOT NULL DEFAULT '', UNIQUE (account, client_key))""",
    """CREATE TABLE IF NOT EXISTS asyncq_jobs (
        id TEXT PRIMARY KEY, batch_id TEXT NOT NULL, idx INTEGER NOT NULL, account TEXT NOT NULL,
        model TEXT NOT NULL, priority INTEGER NOT NULL, body TEXT NOT NULL,
        external_reference TEXT, status TEXT NOT NULL, attempts INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        available_at DOUBLE PRECISION NOT NULL, started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION, result TEXT, error TEXT, owner TEXT,
        lease_expires_at DOUBLE PRECISION, progress TEXT)""",
    "CREATE INDEX IF NOT EXISTS asyncq_batches_account ON asyncq_batches (account, created_at)",
    "CREATE INDEX IF NOT EXISTS asyncq_jobs_ready ON asyncq_jobs (status, priority, created_at, idx)",
    "CREATE INDEX IF NOT EXISTS asyncq_jobs_lease ON asyncq_jobs (status, lease_expires_at)",
    "CREATE INDEX IF NOT EXISTS asyncq_jobs_batch ON asyncq_jobs (batch_id, idx)",
    """CREATE TABLE IF NOT EXISTS asyncq_events (
        id TEXT PRIMARY KEY, type TEXT NOT NULL, batch_id TEXT NOT NULL, account TEXT NOT NULL,
        model TEXT NOT NULL, payload TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        tenant TEXT NOT NULL DEFAULT '', UNIQUE (batch_id, type))""",
    """CREATE TABLE IF NOT EXISTS asyncq_subscriptions (
        id TEXT PRIMARY KEY, account TEXT NOT NULL, url TEXT NOT NULL, event_types TEXT NOT NULL,
        secret TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, tenant TEXT NOT NULL DEFAULT '')""",
    """CREATE TABLE IF NOT EXISTS asyncq_deliveries (
        id TEXT PRIMARY KEY, event_id TEXT NOT NULL, subscription_id TEXT NOT NULL,
        account TEXT NOT NULL, url TEXT NOT NULL, secret TEXT NOT NULL, status TEXT NOT NULL,
        attempts INTEGER NOT NULL, next_at DOUBLE PRECISION NOT NULL, last_error TEXT,
        tenant TEXT NOT NULL DEFAULT '', UNIQUE (event_id, subscription_id))""",
    "CREATE INDEX IF NOT EXISTS asyncq_deliveries_due ON asyncq_deliveries (status, next_at)",
    """CREATE TABLE IF NOT EXISTS asyncq_files (
        id TEXT PRIMARY KEY, account TEXT NOT NULL, purpose TEXT NOT NULL, filename TEXT NOT NULL,
        bytes INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL, content TEXT NOT NULL,
        tenant TEXT NOT NULL DEFAULT '')""",
)

# Columns added after a table's first release: (table, column, type), added to a store created
# before them when it is opened (CREATE TABLE IF NOT EXISTS leaves an existing table as it was).
_TENANT = "TEXT NOT NULL DEFAULT ''"
ADDED_COLUMNS = (("asyncq_jobs", "progress", "TEXT"),
                 *((table, "tenant", _TENANT) for table in (
                     "asyncq_batches", "asyncq_events", "asyncq_subscriptions", "asyncq_deliveries",
                     "asyncq_files")))

BATCH_COLUMNS = ("id, account, model, client_key, priority, created_at, total, succeeded, failed, "
                 "cancelled, meta, tenant")
JOB_COLUMNS = ("id, batch_id, idx, account, model, priority, body, external_reference, status, "
               "attempts, max_attempts, created_at, started_at, finished_at, result, error, owner, "
               "lease_expires_at, progress")
EVENT_COLUMNS = "e.id, e.type, e.batch_id, e.account, e.model, e.payload, e.created_at, e.tenant"
SUBSCRIPTION_COLUMNS = "id, account, url, event_types, secret, created_at, tenant"
DELIVERY_COLUMNS = ("d.id, d.subscription_id, d.url, d.secret, d.status, d.attempts, d.next_at, "
                    "d.last_error, " + EVENT_COLUMNS)


def dumps(value) -> str:
    return orjson.dumps(value).decode()


def _loads(text: str | None):
    return None if text is None else orjson.loads(text)


def batch_from_row(r: tuple) -> Batch:
    return Batch(id=r[0], account=r[1], model=r[2], key=unscoped(r[11], r[3]), priority=r[4], created_at=r[5],
                 total=r[6], succeeded=r[7], failed=r[8], cancelled=r[9], meta=orjson.loads(r[10]),
                 tenant=r[11])


def job_from_row(r: tuple) -> Job:
    return Job(id=r[0], batch_id=r[1], index=r[2], account=r[3], model=r[4], priority=r[5],
               body=orjson.loads(r[6]), external_reference=r[7], status=JobStatus(r[8]),
               attempts=r[9], max_attempts=r[10], created_at=r[11], started_at=r[12],
               finished_at=r[13], result=_loads(r[14]), error=_loads(r[15]), owner=r[16],
               lease_expires_at=r[17], progress=_loads(r[18]))


def event_from_row(r: tuple) -> Event:
    return Event(id=r[0], type=EventType(r[1]), batch_id=r[2], account=r[3], model=r[4],
                 payload=orjson.loads(r[5]), created_at=r[6], tenant=r[7])


def subscription_from_row(r: tuple) -> Subscription:
    return Subscription(id=r[0], account=r[1], url=r[2],
                        event_types=tuple(EventType(t) for t in r[3].split(",") if t),
                        secret=r[4], created_at=r[5], tenant=r[6])


def delivery_from_row(r: tuple) -> Delivery:
    return Delivery(id=r[0], subscription_id=r[1], url=r[2], secret=r[3],
                    status=DeliveryStatus(r[4]), attempts=r[5], next_at=r[6], last_error=r[7],
                    event=event_from_row(r[8:]))
