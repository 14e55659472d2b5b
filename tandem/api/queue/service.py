"""The asynchronous request queue inside an app (a gateway, or a single `tandem serve`):
the durable store (tandem.asyncq), a dispatcher that runs queued jobs through the app's own
Backend.generate (the same path as interactive requests), and the event notifier.

Jobs are stored as {"api": "workers_ai" | "openai", ...} (see the runners in
workers_ai/queued_api.py and openai/batch_api.py). Errors a client caused (4xx) fail a job at
once; capacity errors (429, 503) put it back on the queue (it waits for headroom, never fails
for lack of capacity); anything else is retried until the job's attempts are spent.

Interactive requests first (pressure.py): the service puts a `GaugedBackend` in front of
the app's backend (`ctx.backend`), so it sees every interactive request start and end. Queued
work is taken only while the pools have headroom, few interactive requests are in flight and
fewer than `prefill_concurrency` of this app's queued requests are still computing their
prompts (their runners report the first token through `JobProgress`), and is preempted back to
the queue (no attempt counted) when interactive requests arrive. Queued requests run
at `background_priority` (+ a batch line's own vLLM `priority`, if positive): the engine's
scheduler orders by it where it honours priorities. A preempted job loses no work: its run is
cancelled at once (closing its streams aborts its engine requests), what it produced is saved
with the job, and its next run continues from there (`run_job`, tandem/api/queue/job_outputs.py).

The store is opened on a thread from construction on (a new SQLite file costs ~50 ms, a
PostgreSQL connection a network round trip), so that it overlaps the rest of the start-up;
`start()` waits for it. Routes use `service.queue` only while the app is serving.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from tandem.api.backend import Backend
from tandem.api.context import ServerContext
from tandem.api.metering import JobMeter
from tandem.api.queue.job_outputs import JobOutputs
from tandem.api.queue.metrics import QueueCollector, QueueReading
from tandem.api.queue.pressure import GaugedBackend, InteractiveLoad, PressurePolicy
from tandem.api.run import check_delta
from tandem.asyncq.dispatcher import Checkpoint, Dispatcher, DispatcherConfig, JobFailed, Preempted
from tandem.asyncq.job import ANONYMOUS, JSON, Batch, BatchSpec, Job
from tandem.asyncq.notifier import Notifier, NotifierConfig
from tandem.asyncq.open_queue import open_queue
from tandem.asyncq.queue import JobQueue
from tandem.errors import CapacityExceeded, NoHealthyWorker, RateLimited, TandemError
from tandem.types import EngineRequest

JobRunner = Callable[[ServerContext, Job, "QueueConfig", "JobProgress"], Awaitable[JSON]]


class JobProgress:
    """Handed to a job's runner, which calls `prefilled()` once every engine request of the job
    has its first delta (its prompt is computed); counts the app's jobs still before that.
    `checkpoint`: where the runner registers what it has produced (`run_job` does), which the
    dispatcher saves with the job when it is preempted."""

    def __init__(self, counts: dict[str, int], wake: Callable[[], None],
                 checkpoint: Checkpoint | None = None) -> None:
        self._counts = counts
        self._wake = wake
        self._done = False
        self.checkpoint = checkpoint if checkpoint is not None else Checkpoint()
        counts["prefilling"] += 1

    def prefilled(self) -> None:
        if not self._done:
            self._done = True
            self._counts["prefilling"] -= 1
            self._wake()      # the next queued prompt may start


@dataclass(frozen=True)
class QueueConfig:
    target: str                          # SQLite file path, or redis://... / postgresql://...
    owner: str | None = None             # lease owner id; None: host:pid:random (new per start)
    max_concurrency: int = 8             # queued jobs running at once in this app
    lease_s: float = 30.0                # a crashed app's jobs run again elsewhere after this
    max_attempts: int = 3                # runs of one job before it fails (preemptions do not count)
    retry_delay_s: float = 1.0
    max_payload_bytes: int = 10 * 2**20  # a queued request body above this: 413 (Workers AI's limit)
    max_file_bytes: int = 100 * 2**20    # a /v1/files upload above this: 413 (--max-file-bytes)
    poll_s: float = 0.5                  # dispatcher's look at the queue when idle
    # headroom: queued work is taken only while some worker has at most this many prompt tokens
    # waiting to be computed (and, on a worker, its KV cache below headroom_kv_usage)
    headroom_prefill_tokens: int = 2048
    # queued requests of this app computing their prompts at once: the next one is taken once a
    # running one has its first token, so an interactive request that arrives waits for at most
    # this many queued prompts' prefill (docs/benchmarks.md 9: eight at once raised interactive
    # p90 TTFT by ~65% on two CPU cores)
    prefill_concurrency: int = 1
    headroom_kv_usage: float = 0.8
    # queued work runs only while at most this many interactive requests are in flight in this
    # app; beyond it every running queued request is preempted back to the queue (0: queued
    # work only runs while no interactive request does)
    interactive_limit: int = 0
    # engine priority of queued requests (vLLM's convention: lower first; interactive ones
    # default to 0); requests at this priority or above count as background, not interactive
    background_priority: int = 10
    # webhook URLs a subscription may name: prefixes such as "https://hooks.example.com/";
    # empty: any http(s) URL (the gateway then posts wherever an API client asks)
    event_url_allow: tuple[str, ...] = ()
    notifier: NotifierConfig = field(default_factory=NotifierConfig)

    def engine_priority(self, requested: int = 0) -> int:
        """A queued request's engine priority: never above background (a lower value)."""
        return self.background_priority + max(0, requested)


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


def _open_in_background(target: str) -> Future:
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asyncq-open")
    try:
        return pool.submit(open_queue, target)
    finally:
        pool.shutdown(wait=False)


class QueueService:
    def __init__(self, ctx: ServerContext, setup: QueueSetup, runners: Mapping[str, JobRunner]) -> None:
        """`runners`: job kind (the "api" a job was stored under) -> the API's runner of such a job
        (tandem/api/queue/routes.py names them; the service knows no wire format)."""
        cfg = setup.config
        self.ctx = ctx
        self.config = cfg
        self._opening = _open_in_background(cfg.target)
        self._queue: JobQueue | None = None
        self._runners = dict(runners)
        self.load = InteractiveLoad()
        self.policy = PressurePolicy(cfg.interactive_limit, setup.headroom)
        self._counts = {"prefilling": 0}   # this app's running jobs whose prompts are not computed
        # every route's requests (and the queued ones) now pass the gauge
        ctx.backend = GaugedBackend(ctx.backend, cfg.background_priority, self.load,
                                    on_start=self._interactive_started,
                                    on_end=self._interactive_ended)
        self._dispatcher_config = DispatcherConfig(
            owner=cfg.owner or default_owner(), max_concurrency=cfg.max_concurrency,
            lease_s=cfg.lease_s, renew_every_s=cfg.lease_s / 3, idle_poll_s=cfg.poll_s,
            retry_delay_s=cfg.retry_delay_s)
        self.dispatcher: Dispatcher | None = None
        self.notifier: Notifier | None = None
        ctx.metrics.registry.register(QueueCollector(self._metrics))

    def _metrics(self) -> QueueReading:
        d = self.dispatcher
        if d is None:
            return QueueReading(0, 0, self.load.in_flight, {})
        return QueueReading(d.running, d.preemptions, self.load.in_flight, dict(d.outcomes))

    @property
    def queue(self) -> JobQueue:
        if self._queue is None:
            raise RuntimeError("the queue is not open yet: QueueService.start() opens it")
        return self._queue

    def _can_take(self) -> bool:
        return (self._counts["prefilling"] < self.config.prefill_concurrency
                and self.policy.can_take(self.load))

    def _interactive_started(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.check_pressure()

    def _interactive_ended(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.wake()

    async def start(self) -> None:
        self._queue = await asyncio.wrap_future(self._opening)
        self.dispatcher = Dispatcher(
            self._queue, self._run, self._can_take,
            self._dispatcher_config,
            pressure=lambda running: self.policy.to_preempt(self.load, running))
        self.notifier = Notifier(self._queue, self.config.notifier)
        self.dispatcher.start()
        self.notifier.start()

    async def stop(self) -> None:
        """Running jobs go back to the queue (another app, or this one restarted, takes them)."""
        if self.dispatcher is not None:
            await self.dispatcher.stop(grace_s=2.0)
        if self.notifier is not None:
            await self.notifier.stop()
        queue = self._queue if self._queue is not None else await asyncio.wrap_future(self._opening)
        self._queue = None
        await queue.close()

    async def enqueue(self, spec: BatchSpec) -> tuple[Batch, bool]:
        batch, created = await self.queue.enqueue(spec)
        if self.dispatcher is not None and self.notifier is not None:
            self.dispatcher.wake()
            self.notifier.wake()
        return batch, created

    async def _run(self, job: Job, checkpoint: Checkpoint) -> JSON:
        runner = self._runners.get(job.body.get("api"))
        if runner is None:
            raise JobFailed({"message": f"unknown job kind {job.body.get('api')!r}",
                             "type": "invalid_request_error", "status": 400})
        progress = JobProgress(self._counts, self.dispatcher.wake, checkpoint)
        try:
            return await runner(self.ctx, job, self.config, progress)
        except (CapacityExceeded, NoHealthyWorker) as exc:
            raise Preempted() from exc
        except RateLimited as exc:   # the account's batch limit: back to the queue until it fits
            raise Preempted(delay_s=exc.retry_after_s) from exc
        except TandemError as exc:
            error = {"message": exc.message, "type": exc.error_type, "param": exc.param,
                     "code": exc.code, "status": exc.status}
            raise JobFailed(error, retryable=exc.status >= 500) from exc
        finally:
            progress.prefilled()


async def run_job(ctx: ServerContext, job: Job, reqs: list[EngineRequest],
                  progress: JobProgress, choices_per_prompt: int = 1) -> JobOutputs:
    """A job's engine requests through the app's backend, continuing what earlier runs of the
    job produced (tandem/api/queue/job_outputs.py) -> every request's output, for the API's formatter.
    Preempted (the task cancelled): closing the run aborts its engine requests at once, and the
    dispatcher saves the outputs so far with the job. Metered (tandem/api/metering.py JobMeter):
    the run is admitted under the account's batch limit (RateLimited: nothing ran), and the job
    is recorded in the usage ledger once it has its whole output, before its result is stored."""
    outputs = JobOutputs(len(reqs), job.progress)
    progress.checkpoint.track(outputs.snapshot)
    todo = outputs.pending()
    meter = None if ctx.meter is None else JobMeter(
        ctx.meter, job.id, job.body.get("tenant") or ANONYMOUS, ctx.served_name, choices_per_prompt)
    whole = not todo
    if todo:
        pending = outputs.requests(reqs)
        if meter is not None:
            await meter.admit(pending)
        run = ctx.run(pending, metered=False)
        try:
            await run.start()
            progress.prefilled()   # every request has its first token
            async for j, d in run.deltas():
                outputs.add(todo[j], check_delta(d))
                if meter is not None:
                    meter.observe(d)
            whole = not outputs.pending()
        finally:
            await run.aclose()
            if meter is not None:
                await meter.settle(*((reqs, outputs.deltas()) if whole else ()))
    elif meter is not None:   # every request had finished in earlier runs
        await meter.settle(reqs, outputs.deltas())
    return outputs


class NotFound(TandemError):
    """A queued batch, file or subscription that does not exist for this account (404)."""

    status = 404
    code = "not_found"


def idempotency_key(headers) -> str | None:
    """The client's `Idempotency-Key` header: the same key twice enqueues once."""
    key = headers.get("idempotency-key")
    return key.strip()[:256] or None if key else None
