"""The asynchronous request queue inside an app (a gateway, or a single `tandem serve`):
the durable store (tandem.asyncq), a dispatcher that runs queued jobs through the app's own
Backend.generate (the same path as interactive requests), and the event notifier.

Jobs are stored as {"api": "workers_ai" | "openai", ...} (see the runners in
workers_ai/queued_api.py and openai/batch_api.py). Errors a client caused (4xx) fail a job at
once; capacity errors (429, 503) put it back on the queue (it waits for headroom, never fails
for lack of capacity); anything else is retried until the job's attempts are spent.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.routing import BaseRoute

from tandem.asyncq.dispatcher import Dispatcher, DispatcherConfig, JobFailed, Preempted
from tandem.asyncq.job import JSON, Batch, BatchSpec, Job
from tandem.asyncq.notifier import Notifier, NotifierConfig
from tandem.asyncq.open_queue import open_queue
from tandem.asyncq.queue import JobQueue
from tandem.errors import CapacityExceeded, NoHealthyWorker, TandemError
from tandem.server.backend import Backend
from tandem.server.context import ServerContext

JobRunner = Callable[[ServerContext, Job], Awaitable[JSON]]


@dataclass(frozen=True)
class QueueConfig:
    target: str                          # SQLite file path, or redis://... / postgresql://...
    owner: str | None = None             # lease owner id; None: host:pid:random (new per start)
    max_concurrency: int = 8             # queued jobs running at once in this app
    lease_s: float = 30.0                # a crashed app's jobs run again elsewhere after this
    max_attempts: int = 3                # runs of one job before it fails (preemptions do not count)
    retry_delay_s: float = 1.0
    max_payload_bytes: int = 10 * 2**20  # a queued request body above this: 413 (Workers AI's limit)
    max_file_bytes: int = 100 * 2**20    # an uploaded batch input file above this: 413
    poll_s: float = 0.5                  # dispatcher's look at the queue when idle
    # headroom: queued work is taken only while some worker has at most this many prompt tokens
    # waiting to be computed (and, on a worker, its KV cache below headroom_kv_usage)
    headroom_prefill_tokens: int = 2048
    headroom_kv_usage: float = 0.8
    notifier: NotifierConfig = field(default_factory=NotifierConfig)


@dataclass(frozen=True)
class QueueSetup:
    """What an app needs to serve the queue: its config and the caller's `headroom()` (True
    while the pools can take queued work without hurting interactive traffic)."""
    config: QueueConfig
    headroom: Callable[[], bool]


def engine_headroom(backend: Backend, cfg: QueueConfig) -> Callable[[], bool]:
    """A single server's headroom (`tandem serve`): nothing waits to be admitted, few prompt
    tokens wait to be computed, and the KV cache has room."""
    def headroom() -> bool:
        s = backend.stats()
        return (s.num_waiting == 0 and s.waiting_prefill_tokens <= cfg.headroom_prefill_tokens
                and s.kv_cache_usage < cfg.headroom_kv_usage)
    return headroom


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class QueueService:
    def __init__(self, ctx: ServerContext, setup: QueueSetup) -> None:
        from tandem.server.openai.batch_api import run_openai_job
        from tandem.server.workers_ai.queued_api import run_workers_ai_job

        cfg = setup.config
        self.ctx = ctx
        self.config = cfg
        self.queue: JobQueue = open_queue(cfg.target)
        self._runners: dict[str, JobRunner] = {"workers_ai": run_workers_ai_job,
                                               "openai": run_openai_job}
        self.dispatcher = Dispatcher(self.queue, self._run, setup.headroom, DispatcherConfig(
            owner=cfg.owner or default_owner(), max_concurrency=cfg.max_concurrency,
            lease_s=cfg.lease_s, renew_every_s=cfg.lease_s / 3, idle_poll_s=cfg.poll_s,
            retry_delay_s=cfg.retry_delay_s))
        self.notifier = Notifier(self.queue, cfg.notifier)

    def routes(self) -> list[BaseRoute]:
        from tandem.server.openai.batch_api import batch_routes
        from tandem.server.openai.files_api import file_routes
        from tandem.server.workers_ai.batch_events_api import batch_event_routes
        from tandem.server.workers_ai.subscriptions_api import subscription_routes

        return [*file_routes(self), *batch_routes(self), *subscription_routes(self),
                *batch_event_routes(self)]

    async def start(self) -> None:
        self.dispatcher.start()
        self.notifier.start()

    async def stop(self) -> None:
        """Running jobs go back to the queue (another app, or this one restarted, takes them)."""
        await self.dispatcher.stop(grace_s=2.0)
        await self.notifier.stop()
        await self.queue.close()

    async def enqueue(self, spec: BatchSpec) -> tuple[Batch, bool]:
        batch, created = await self.queue.enqueue(spec)
        self.dispatcher.wake()
        self.notifier.wake()
        return batch, created

    async def _run(self, job: Job) -> JSON:
        runner = self._runners.get(job.body.get("api"))
        if runner is None:
            raise JobFailed({"message": f"unknown job kind {job.body.get('api')!r}",
                             "type": "invalid_request_error", "status": 400})
        try:
            return await runner(self.ctx, job)
        except (CapacityExceeded, NoHealthyWorker) as exc:
            raise Preempted() from exc
        except TandemError as exc:
            error = {"message": exc.message, "type": exc.error_type, "param": exc.param,
                     "code": exc.code, "status": exc.status}
            raise JobFailed(error, retryable=exc.status >= 500) from exc


class NotFound(TandemError):
    """A queued batch, file or subscription that does not exist for this account (404)."""

    status = 404
    code = "not_found"


def idempotency_key(headers) -> str | None:
    """The client's `Idempotency-Key` header: the same key twice enqueues once."""
    key = headers.get("idempotency-key")
    return key.strip()[:256] or None if key else None
