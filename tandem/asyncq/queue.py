"""The durable queue's interface; backends: SQLite (sqlite_queue.py), PostgreSQL
(postgres_queue.py), Redis (redis_queue.py).

Invariants every backend keeps (tests/asyncq/test_queue.py runs the same tests on each):
- Ownership (tandem/asyncq/job.py): the methods a client's request calls take its `tenant` and
  see only that tenant's objects: an id another tenant created reads as absent (None, [], False,
  0), lists hold only the tenant's own, and a subscription receives only the events of its own
  tenant's batches. `take`, `get` and the outbox's delivery calls are the server's own.
- `enqueue` with a key already seen for the tenant and account returns the first batch; never two
  copies.
- A job is RUNNING under at most one unexpired lease. `take` first returns jobs whose lease expired
  to the queue (or fails them when their attempts are spent), then leases queued jobs in
  (priority, enqueue order).
- A job's `progress` is set only by `renew` and `requeue` under its current lease, kept by a
  retry (a retried job continues from it too), and removed when the job ends (succeeded,
  failed or cancelled: its result supersedes it).
- `complete`, `fail`, `requeue` and `renew` act only for the current lease (same owner and attempt,
  not expired, job still RUNNING); otherwise they change nothing and return False / None. So a
  result is recorded at most once, and never by an owner whose lease expired.
- A batch's final event is recorded exactly once, in the transaction that made its last job
  terminal, together with one delivery per matching subscription (the outbox).
"""

from __future__ import annotations

from typing import Protocol

from tandem.asyncq.event import Delivery, Event, Subscription, SubscriptionSpec
from tandem.asyncq.job import JSON, Batch, BatchSpec, Claim, Job, JobStatus, Lease, StoredFile
from tandem.errors import InvalidRequest


class KeyTaken(InvalidRequest):
    """`enqueue`: the idempotency key's scoped form (job.scoped) is held by another tenant's batch,
    which only a key or account containing the separator can cause; refused (400), revealing
    nothing of that batch."""

    def __init__(self) -> None:
        super().__init__("this Idempotency-Key cannot be used here; send another", param="Idempotency-Key")


class JobQueue(Protocol):
    # --- jobs -----------------------------------------------------------------------------
    async def enqueue(self, spec: BatchSpec) -> tuple[Batch, bool]:
        """-> (the batch, whether it was created now). The queued event is recorded only then.
        Raises KeyTaken."""

    async def take(self, n: int, owner: str, lease_s: float) -> list[Claim]:
        """Lease up to n jobs to `owner` for `lease_s` seconds; each take counts one attempt."""

    async def renew(self, lease: Lease, lease_s: float, progress: JSON | None = None) -> Lease | None:
        """Extend a current lease to now + lease_s, and save `progress` (when not None) as the
        job's progress; None if the lease is no longer current (expired, cancelled, taken by
        someone else): the holder must stop working on the job, and nothing is saved."""

    async def complete(self, lease: Lease, result: JSON) -> bool:
        """Record the result (RUNNING -> SUCCEEDED) if the lease is current."""

    async def fail(self, lease: Lease, error: JSON, retryable: bool,
                   retry_delay_s: float = 0.0) -> JobStatus | None:
        """RUNNING -> QUEUED (available after retry_delay_s) when retryable and attempts remain,
        else -> FAILED. None if the lease is not current."""

    async def requeue(self, lease: Lease, progress: JSON | None = None, delay_s: float = 0.0) -> bool:
        """Preempted: RUNNING -> QUEUED (available after delay_s: a rate limit's wait), and the
        attempt is not counted; `progress` (when not None) replaces the job's saved progress,
        which the next run continues from."""

    async def cancel(self, batch_id: str, tenant: str) -> int:
        """Cancel the batch's unfinished jobs (queued or running: a running job's lease stops
        being current); -> how many were cancelled (0 for another tenant's batch)."""

    async def get(self, job_id: str) -> Job | None:
        """Any tenant's job (the dispatcher's)."""

    async def get_batch(self, batch_id: str, tenant: str) -> Batch | None: ...

    async def list_batch(self, batch_id: str, tenant: str) -> list[Job]:
        """The batch's jobs in their index order."""

    async def list_batches(self, account: str, tenant: str) -> list[Batch]:
        """The tenant's batches in the account, newest first."""

    # --- event subscriptions and the outbox ----------------------------------------------
    async def subscribe(self, spec: SubscriptionSpec) -> Subscription: ...

    async def subscriptions(self, account: str, tenant: str) -> list[Subscription]: ...

    async def unsubscribe(self, subscription_id: str, tenant: str) -> bool: ...

    async def take_deliveries(self, n: int, lease_s: float) -> list[Delivery]:
        """Up to n due PENDING deliveries, oldest first; each is counted one attempt and not due
        again for lease_s (so a crashed notifier's deliveries are retried, never lost)."""

    async def finish_delivery(self, delivery: Delivery, ok: bool, error: str | None,
                              retry_in_s: float | None) -> bool:
        """After an attempt: ok -> DELIVERED; otherwise PENDING again in retry_in_s, or DEAD
        when retry_in_s is None. Acts only if no later attempt has started (-> False)."""

    async def dead_letters(self, account: str, tenant: str) -> list[Delivery]:
        """Deliveries to the tenant's subscriptions in the account that gave up."""

    async def batch_events(self, batch_id: str, tenant: str) -> list[Event]:
        """The batch's recorded events, oldest first."""

    # --- uploaded files ---------------------------------------------------------------------
    async def put_file(self, account: str, purpose: str, filename: str, content: str,
                       tenant: str) -> StoredFile: ...

    async def get_file(self, file_id: str, tenant: str, with_content: bool = False) -> StoredFile | None: ...

    async def list_files(self, account: str, tenant: str) -> list[StoredFile]:
        """Oldest first, without content."""

    async def delete_file(self, file_id: str, tenant: str) -> bool: ...

    async def close(self) -> None: ...
