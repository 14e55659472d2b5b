"""The queue on SQL (SQLite or PostgreSQL through `SqlDb`): every operation is one transaction.

Concurrency: on SQLite a write transaction holds the database's write lock from its BEGIN
IMMEDIATE, so transactions are serial across processes. On PostgreSQL, takers select rows
`FOR UPDATE SKIP LOCKED` and every change re-checks its condition in its UPDATE; a batch's
counters are updated with `x = x + 1 ... RETURNING`, which locks the batch row, so exactly one
transaction sees the batch's last job finish and records its final event. Batch rows are locked
in id order (after job rows) so that two takers never wait on each other in a cycle.
"""

from __future__ import annotations

import uuid

from tandem.asyncq import sql_outbox
from tandem.asyncq.event import (
    Delivery, Event, EventType, Subscription, SubscriptionSpec, batch_end_event,
)
from tandem.asyncq.job import JSON, Batch, BatchSpec, Claim, Job, JobStatus, Lease, StoredFile, scoped
from tandem.asyncq.queue import KeyTaken
from tandem.asyncq.sql_db import SqlDb, Tx
from tandem.asyncq.sql_schema import (
    ADDED_COLUMNS, BATCH_COLUMNS, JOB_COLUMNS, SCHEMA, batch_from_row, dumps, job_from_row,
)

_TERMINAL_COLUMN = {JobStatus.SUCCEEDED: "succeeded", JobStatus.FAILED: "failed",
                    JobStatus.CANCELLED: "cancelled"}


class SqlQueue:
    """A `JobQueue` (tandem/asyncq/queue.py) on one SQL connection."""

    def __init__(self, db: SqlDb) -> None:
        self._db = db
        db.script(SCHEMA)
        db.add_missing_columns(ADDED_COLUMNS)

    # --- jobs -----------------------------------------------------------------------------
    async def enqueue(self, spec: BatchSpec) -> tuple[Batch, bool]:
        return await self._db.transact(_enqueue, spec)

    async def take(self, n: int, owner: str, lease_s: float) -> list[Claim]:
        return await self._db.transact(_take, n, owner, lease_s)

    async def renew(self, lease: Lease, lease_s: float, progress: JSON | None = None) -> Lease | None:
        return await self._db.transact(_renew, lease, lease_s, progress)

    async def complete(self, lease: Lease, result: JSON) -> bool:
        return await self._db.transact(_finish, lease, JobStatus.SUCCEEDED, result, None) is not None

    async def fail(self, lease: Lease, error: JSON, retryable: bool,
                   retry_delay_s: float = 0.0) -> JobStatus | None:
        return await self._db.transact(_fail, lease, error, retryable, retry_delay_s)

    async def requeue(self, lease: Lease, progress: JSON | None = None, delay_s: float = 0.0) -> bool:
        return await self._db.transact(_requeue, lease, progress, delay_s)

    async def cancel(self, batch_id: str, tenant: str) -> int:
        return await self._db.transact(_cancel, batch_id, tenant)

    async def get(self, job_id: str) -> Job | None:
        return await self._db.transact(_get, job_id)

    async def get_batch(self, batch_id: str, tenant: str) -> Batch | None:
        return await self._db.transact(_get_batch, batch_id, tenant)

    async def list_batch(self, batch_id: str, tenant: str) -> list[Job]:
        return await self._db.transact(_list_batch, batch_id, tenant)

    async def list_batches(self, account: str, tenant: str) -> list[Batch]:
        return await self._db.transact(_list_batches, account, tenant)

    # --- events -----------------------------------------------------------------------------
    async def subscribe(self, spec: SubscriptionSpec) -> Subscription:
        return await self._db.transact(sql_outbox.subscribe, spec)

    async def subscriptions(self, account: str, tenant: str) -> list[Subscription]:
        return await self._db.transact(sql_outbox.subscriptions, account, tenant)

    async def unsubscribe(self, subscription_id: str, tenant: str) -> bool:
        return await self._db.transact(sql_outbox.unsubscribe, subscription_id, tenant)

    async def take_deliveries(self, n: int, lease_s: float) -> list[Delivery]:
        return await self._db.transact(sql_outbox.take_deliveries, n, lease_s)

    async def finish_delivery(self, delivery: Delivery, ok: bool, error: str | None,
                              retry_in_s: float | None) -> bool:
        return await self._db.transact(sql_outbox.finish_delivery, delivery, ok, error, retry_in_s)

    async def dead_letters(self, account: str, tenant: str) -> list[Delivery]:
        return await self._db.transact(sql_outbox.dead_letters, account, tenant)

    async def batch_events(self, batch_id: str, tenant: str) -> list[Event]:
        return await self._db.transact(sql_outbox.batch_events, batch_id, tenant)

    # --- files ------------------------------------------------------------------------------
    async def put_file(self, account: str, purpose: str, filename: str, content: str,
                       tenant: str) -> StoredFile:
        return await self._db.transact(_put_file, account, purpose, filename, content, tenant)

    async def get_file(self, file_id: str, tenant: str, with_content: bool = False) -> StoredFile | None:
        return await self._db.transact(_get_file, file_id, tenant, with_content)

    async def list_files(self, account: str, tenant: str) -> list[StoredFile]:
        return await self._db.transact(_list_files, account, tenant)

    async def delete_file(self, file_id: str, tenant: str) -> bool:
        return await self._db.transact(lambda tx: bool(tx.rows(
            "DELETE FROM asyncq_files WHERE id = ? AND tenant = ? RETURNING id", (file_id, tenant))))

    async def close(self) -> None:
        await self._db.close()


_FILE_COLUMNS = "id, account, purpose, filename, bytes, created_at"   # StoredFile's order


def _put_file(tx: Tx, account: str, purpose: str, filename: str, content: str,
              tenant: str) -> StoredFile:
    f = StoredFile(id="file-" + uuid.uuid4().hex, account=account, purpose=purpose,
                   filename=filename, bytes=len(content.encode()), created_at=tx.now, tenant=tenant)
    tx.rows(f"INSERT INTO asyncq_files ({_FILE_COLUMNS}, content, tenant) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (f.id, f.account, f.purpose, f.filename, f.bytes, f.created_at, content, tenant))
    return f


def _get_file(tx: Tx, file_id: str, tenant: str, with_content: bool) -> StoredFile | None:
    rows = tx.rows(f"SELECT {_FILE_COLUMNS}, {'content' if with_content else 'NULL'}, tenant "
                   "FROM asyncq_files WHERE id = ? AND tenant = ?", (file_id, tenant))
    return StoredFile(*rows[0]) if rows else None


def _list_files(tx: Tx, account: str, tenant: str) -> list[StoredFile]:
    rows = tx.rows(f"SELECT {_FILE_COLUMNS}, NULL, tenant FROM asyncq_files "
                   "WHERE account = ? AND tenant = ? ORDER BY created_at, id", (account, tenant))
    return [StoredFile(*r) for r in rows]


def _get_batch(tx: Tx, batch_id: str, tenant: str) -> Batch | None:
    rows = tx.rows(f"SELECT {BATCH_COLUMNS} FROM asyncq_batches WHERE id = ? AND tenant = ?",
                   (batch_id, tenant))
    return batch_from_row(rows[0]) if rows else None


def _get(tx: Tx, job_id: str) -> Job | None:
    rows = tx.rows(f"SELECT {JOB_COLUMNS} FROM asyncq_jobs WHERE id = ?", (job_id,))
    return job_from_row(rows[0]) if rows else None


def _owns(tx: Tx, batch_id: str, tenant: str) -> bool:
    return bool(tx.rows("SELECT 1 FROM asyncq_batches WHERE id = ? AND tenant = ?", (batch_id, tenant)))


def _list_batch(tx: Tx, batch_id: str, tenant: str) -> list[Job]:
    if not _owns(tx, batch_id, tenant):
        return []
    rows = tx.rows(f"SELECT {JOB_COLUMNS} FROM asyncq_jobs WHERE batch_id = ? ORDER BY idx",
                   (batch_id,))
    return [job_from_row(r) for r in rows]


def _list_batches(tx: Tx, account: str, tenant: str) -> list[Batch]:
    rows = tx.rows(f"SELECT {BATCH_COLUMNS} FROM asyncq_batches WHERE account = ? AND tenant = ? "
                   "ORDER BY created_at DESC, id DESC", (account, tenant))
    return [batch_from_row(r) for r in rows]


def _enqueue(tx: Tx, spec: BatchSpec) -> tuple[Batch, bool]:
    batch_id = uuid.uuid4().hex
    key = None if spec.key is None else scoped(spec.tenant, spec.key)
    created = tx.rows(
        "INSERT INTO asyncq_batches (id, account, model, client_key, priority, created_at, total, "
        "succeeded, failed, cancelled, meta, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0, ?, ?) "
        "ON CONFLICT (account, client_key) DO NOTHING RETURNING id",
        (batch_id, spec.account, spec.model, key, spec.priority, tx.now, len(spec.jobs),
         dumps(spec.meta), spec.tenant))
    if not created:  # the key was seen: the first batch, unchanged
        rows = tx.rows(f"SELECT {BATCH_COLUMNS} FROM asyncq_batches WHERE account = ? AND "
                       "client_key = ? AND tenant = ?", (spec.account, key, spec.tenant))
        if not rows:
            raise KeyTaken()
        return batch_from_row(rows[0]), False
    for idx, job in enumerate(spec.jobs):
        tx.rows("INSERT INTO asyncq_jobs (id, batch_id, idx, account, model, priority, body, "
                "external_reference, status, attempts, max_attempts, created_at, available_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?, ?)",
                (uuid.uuid4().hex, batch_id, idx, spec.account, spec.model, spec.priority,
                 dumps(job.body), job.external_reference, spec.max_attempts, tx.now, tx.now))
    sql_outbox.record_event(tx, EventType.QUEUED, batch_id, spec.account, spec.model, spec.tenant)
    if not spec.jobs:  # an empty batch is done at once
        _count_terminal(tx, {batch_id: {}})
    return _get_batch(tx, batch_id, spec.tenant), True


def _take(tx: Tx, n: int, owner: str, lease_s: float) -> list[Claim]:
    _reap_expired(tx)
    ready = tx.rows("SELECT id FROM asyncq_jobs WHERE status = 'queued' AND available_at <= ? "
                    "ORDER BY priority, created_at, batch_id, idx LIMIT ? {SKIP_LOCKED}", (tx.now, n))
    claims = []
    for (job_id,) in ready:
        tx.rows("UPDATE asyncq_jobs SET status = 'running', attempts = attempts + 1, owner = ?, "
                "lease_expires_at = ?, started_at = ? WHERE id = ? AND status = 'queued'",
                (owner, tx.now + lease_s, tx.now, job_id))
        job = _get(tx, job_id)
        if job is not None and job.status is JobStatus.RUNNING and job.owner == owner:
            claims.append(Claim(job, Lease(job.id, owner, job.attempts, job.lease_expires_at)))
    return claims


def _reap_expired(tx: Tx) -> None:
    """Jobs whose lease expired (their owner crashed or stalled) go back to the queue, or fail
    when their attempts are spent (a job that kills its runner must not loop forever)."""
    expired = tx.rows("SELECT id, batch_id, attempts >= max_attempts FROM asyncq_jobs "
                      "WHERE status = 'running' AND lease_expires_at <= ? {SKIP_LOCKED}", (tx.now,))
    spent: dict[str, dict[JobStatus, int]] = {}
    for job_id, batch_id, exhausted in expired:
        if exhausted:
            tx.rows("UPDATE asyncq_jobs SET status = 'failed', finished_at = ?, owner = NULL, "
                    "lease_expires_at = NULL, progress = NULL, error = ? WHERE id = ?",
                    (tx.now, dumps({"message": "lease expired on the last attempt",
                                    "type": "lease_expired"}), job_id))
            counts = spent.setdefault(batch_id, {})
            counts[JobStatus.FAILED] = counts.get(JobStatus.FAILED, 0) + 1
        else:
            tx.rows("UPDATE asyncq_jobs SET status = 'queued', owner = NULL, "
                    "lease_expires_at = NULL, available_at = ? WHERE id = ?", (tx.now, job_id))
    _count_terminal(tx, spent)


def _count_terminal(tx: Tx, per_batch: dict[str, dict[JobStatus, int]]) -> None:
    """Add jobs that became terminal to their batches' counters (batch rows locked in id order);
    the transaction that completes a batch records its final event."""
    for batch_id in sorted(per_batch):
        sets = [f"{_TERMINAL_COLUMN[s]} = {_TERMINAL_COLUMN[s]} + {int(k)}"
                for s, k in per_batch[batch_id].items()] or ["total = total"]
        row = tx.rows(f"UPDATE asyncq_batches SET {', '.join(sets)} WHERE id = ? "
                      "RETURNING account, model, total, succeeded, failed, cancelled, tenant", (batch_id,))
        account, model, total, succeeded, failed, cancelled, tenant = row[0]
        if succeeded + failed + cancelled == total:
            sql_outbox.record_event(
                tx, batch_end_event(succeeded, failed, cancelled), batch_id, account, model, tenant,
                {"total": total, "succeeded": succeeded, "failed": failed, "cancelled": cancelled})


def _current(tx: Tx, lease: Lease) -> tuple | None:
    """The job's (batch_id, attempts, max_attempts) if `lease` is its current lease, row locked."""
    rows = tx.rows("SELECT batch_id, attempts, max_attempts FROM asyncq_jobs WHERE id = ? AND "
                   "status = 'running' AND owner = ? AND attempts = ? AND lease_expires_at > ? "
                   "{FOR_UPDATE}", (lease.job_id, lease.owner, lease.attempt, tx.now))
    return rows[0] if rows else None


def _save_progress(tx: Tx, job_id: str, progress: JSON | None) -> None:
    if progress is not None:
        tx.rows("UPDATE asyncq_jobs SET progress = ? WHERE id = ?", (dumps(progress), job_id))


def _renew(tx: Tx, lease: Lease, lease_s: float, progress: JSON | None) -> Lease | None:
    if _current(tx, lease) is None:
        return None
    tx.rows("UPDATE asyncq_jobs SET lease_expires_at = ? WHERE id = ?", (tx.now + lease_s, lease.job_id))
    _save_progress(tx, lease.job_id, progress)
    return Lease(lease.job_id, lease.owner, lease.attempt, tx.now + lease_s)


def _finish(tx: Tx, lease: Lease, status: JobStatus, result: JSON | None,
            error: JSON | None) -> JobStatus | None:
    current = _current(tx, lease)
    if current is None:
        return None
    tx.rows("UPDATE asyncq_jobs SET status = ?, finished_at = ?, result = ?, error = ?, "
            "owner = NULL, lease_expires_at = NULL, progress = NULL WHERE id = ?",
            (status.value, tx.now, None if result is None else dumps(result),
             None if error is None else dumps(error), lease.job_id))
    _count_terminal(tx, {current[0]: {status: 1}})
    return status


def _fail(tx: Tx, lease: Lease, error: JSON, retryable: bool,
          retry_delay_s: float) -> JobStatus | None:
    current = _current(tx, lease)
    if current is None:
        return None
    _, attempts, max_attempts = current
    if not retryable or attempts >= max_attempts:
        return _finish(tx, lease, JobStatus.FAILED, None, error)
    tx.rows("UPDATE asyncq_jobs SET status = 'queued', owner = NULL, lease_expires_at = NULL, "
            "available_at = ?, error = ? WHERE id = ?", (tx.now + retry_delay_s, dumps(error),
                                                        lease.job_id))
    return JobStatus.QUEUED


def _requeue(tx: Tx, lease: Lease, progress: JSON | None, delay_s: float) -> bool:
    if _current(tx, lease) is None:
        return False
    _save_progress(tx, lease.job_id, progress)
    tx.rows("UPDATE asyncq_jobs SET status = 'queued', attempts = attempts - 1, owner = NULL, "
            "lease_expires_at = NULL, available_at = ? WHERE id = ?",
            (tx.now + max(0.0, delay_s), lease.job_id))
    return True


def _cancel(tx: Tx, batch_id: str, tenant: str) -> int:
    if not _owns(tx, batch_id, tenant):
        return 0
    cancelled = tx.rows("UPDATE asyncq_jobs SET status = 'cancelled', finished_at = ?, "
                        "owner = NULL, lease_expires_at = NULL, progress = NULL WHERE batch_id = ? AND "
                        "status IN ('queued', 'running') RETURNING id", (tx.now, batch_id))
    if cancelled:
        _count_terminal(tx, {batch_id: {JobStatus.CANCELLED: len(cancelled)}})
    return len(cancelled)
