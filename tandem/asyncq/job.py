"""What the queue holds: batches of jobs, their states, and the lease a taker holds on a job.

Plain data, no I/O. Times are Unix seconds (float) from the store's clock: the server's for
Redis and PostgreSQL, this host's for SQLite (one host by construction).

Ownership: everything a client creates (a batch, an uploaded file, a subscription, and with them
their jobs, events and dead letters) belongs to the tenant that created it (the API key's,
RequestContext.tenant; ANONYMOUS on a server without API keys) and to an account (Workers AI's
account id in the path; the tenant's name for OpenAI's routes). Every query a client's request
makes names the tenant, and the store answers only with that tenant's objects: another tenant's
id reads as absent (the API's 404, the same as an id that never existed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

# The tenant of every caller of a server without API keys, and of objects stored before the store
# recorded tenants (their rows and hashes got this default): a server with keys never shows them.
ANONYMOUS = ""


def scoped(tenant: str, name: str) -> str:
    """`name` (an account, an idempotency key) in `tenant`'s namespace, for stores that key by
    name (Redis' sets, the SQL idempotency key): unchanged for ANONYMOUS, so what was stored before
    tenants keeps its keys. Not injective across ANONYMOUS and a tenant (a name may contain the
    separator), so readers also check the stored tenant."""
    return name if tenant == ANONYMOUS else f"{tenant}\x1f{name}"


def unscoped(tenant: str, name: str | None) -> str | None:
    """The name `scoped(tenant, name)` was made from."""
    if name is None or tenant == ANONYMOUS or not name.startswith(tenant + "\x1f"):
        return name
    return name[len(tenant) + 1:]


class JobStatus(str, enum.Enum):
    QUEUED = "queued"        # takeable once available_at has passed
    RUNNING = "running"      # leased by one owner until lease_expires_at
    SUCCEEDED = "succeeded"  # terminal: result recorded exactly once
    FAILED = "failed"        # terminal: attempts spent or a non-retryable error
    CANCELLED = "cancelled"  # terminal: cancelled by the client

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class JobSpec:
    """One request of a batch, as the client sent it."""
    body: JSON
    external_reference: str | None = None


@dataclass(frozen=True)
class BatchSpec:
    """What `enqueue` takes. `key` makes the enqueue idempotent: the same (tenant, account, key)
    twice returns the first batch and its jobs, never a second copy. `priority` follows vLLM: a lower
    value is taken first. `meta` is opaque JSON for the API layer (e.g. an OpenAI batch's
    endpoint and input file)."""
    account: str
    model: str
    jobs: tuple[JobSpec, ...]
    key: str | None = None
    priority: int = 0
    max_attempts: int = 3
    meta: JSON = field(default_factory=dict)
    tenant: str = ANONYMOUS


@dataclass(frozen=True)
class Batch:
    id: str
    account: str
    model: str
    key: str | None
    priority: int
    created_at: float
    total: int
    succeeded: int
    failed: int
    cancelled: int
    meta: JSON
    tenant: str = ANONYMOUS   # who created it (module docstring: ownership)

    @property
    def done(self) -> bool:
        """Every job is terminal (the batch's final event has been recorded)."""
        return self.succeeded + self.failed + self.cancelled == self.total

    @property
    def status(self) -> str:
        """queued (nothing finished yet), running, succeeded (all jobs), failed (some job did
        not succeed: failed or cancelled)."""
        if self.done:
            return "succeeded" if self.succeeded == self.total else "failed"
        return "running" if self.succeeded + self.failed + self.cancelled else "queued"


@dataclass(frozen=True)
class Job:
    id: str
    batch_id: str
    index: int                      # position in the batch (responses keep this order)
    account: str
    model: str
    priority: int
    body: JSON
    external_reference: str | None
    status: JobStatus
    attempts: int                   # starts counted toward max_attempts (preemptions do not count)
    max_attempts: int
    created_at: float
    started_at: float | None        # the latest start
    finished_at: float | None
    result: JSON | None             # set exactly once, with status SUCCEEDED
    error: JSON | None              # the last error (FAILED, or a retry pending)
    owner: str | None               # lease holder while RUNNING
    lease_expires_at: float | None
    # what earlier runs produced (saved when one was preempted or renewed its lease), for the
    # next run to continue from; None once the job has ended. Opaque to the queue
    # (tandem/api/queue/job_outputs.py writes it)
    progress: JSON | None = None


@dataclass(frozen=True)
class Lease:
    """A taker's right to finish one job. `attempt` fences: a lease from an earlier attempt
    (expired, job taken again) never matches the job's current attempt, even for the same owner."""
    job_id: str
    owner: str
    attempt: int
    expires_at: float


@dataclass(frozen=True)
class Claim:
    job: Job
    lease: Lease


@dataclass(frozen=True)
class StoredFile:
    """An uploaded file (an OpenAI batch's JSONL input), kept in the queue's store so that every
    gateway sharing the store can read it. `content` is None in listings."""
    id: str
    account: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    content: str | None = None
    tenant: str = ANONYMOUS
