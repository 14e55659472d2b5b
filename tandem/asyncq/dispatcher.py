"""The dispatcher: pulls queued jobs while the pools have headroom and runs each through the
caller's `run(job)`, under a lease it renews while the job runs.

Invariants:
- A job is taken only right after `headroom()` said True, one take of at most `take_batch` jobs
  at a time, and never more than `max_concurrency` jobs run at once.
- Every job taken ends in exactly one of: complete (run returned), requeue (run raised
  `Preempted`, `preempt()` chose it, or the dispatcher stopped), fail (run raised anything else;
  retried while attempts remain unless it raised `JobFailed(retryable=False)`), or abandonment
  when the lease is lost (renew refused: the job was cancelled or its lease expired and another
  owner may hold it; the run is cancelled and nothing is recorded).
- A requeue does not count an attempt: a job preempted any number of times never fails for it.
- Progress: `run(job, checkpoint)` may `checkpoint.track(snapshot)`; the dispatcher saves
  `snapshot()` with the job when it goes back to the queue (preempted, or the dispatcher
  stopped) and with every lease renewal (so a crashed owner's successor continues from it),
  after the run has ended or between its awaits, never concurrently with a change to it. The
  next run finds it in `job.progress`.
- Interactive traffic is the caller's concern: it answers `headroom()` (may we take more?) and
  `pressure()` (how many running jobs must yield now?), asked before every take and on every
  `check_pressure()`; a job that must yield is cancelled where it awaits (its `run` closes its
  generation streams, which aborts its engine requests and frees their KV blocks) and goes back
  to the queue. Victims: the lowest priority first (the highest value), then the newest.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, Callable

from tandem.asyncq.job import JSON, Claim, Job, Lease
from tandem.asyncq.queue import JobQueue

log = logging.getLogger(__name__)


class Preempted(Exception):
    """Raised by `run` when the job must yield (to interactive work, or to its rate limit): it
    goes back to the queue without counting an attempt, takeable again after `delay_s`."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(f"preempted for {delay_s:g} s" if delay_s else "preempted")
        self.delay_s = delay_s


class JobFailed(Exception):
    """Raised by `run` with the error to record; `retryable=False` fails the job at once."""

    def __init__(self, error: JSON, retryable: bool = False) -> None:
        super().__init__(error.get("message", "job failed"))
        self.error = error
        self.retryable = retryable


@dataclass(frozen=True)
class DispatcherConfig:
    owner: str                      # lease owner id, unique per dispatcher (e.g. gateway id + pid)
    max_concurrency: int = 8        # jobs running at once
    take_batch: int = 1             # jobs per take; headroom() is asked again before each take
    lease_s: float = 30.0           # a crashed dispatcher's jobs are taken up again after this
    renew_every_s: float = 10.0     # < lease_s, with margin for a slow store
    idle_poll_s: float = 0.5        # wait when nothing is queued or there is no headroom
    retry_delay_s: float = 1.0      # a failed, retryable job is takeable again after this


class Checkpoint:
    """A running job's progress, for the dispatcher to save with the job (see the invariants):
    the run registers a function that returns it as JSON, called only when it is saved."""

    def __init__(self) -> None:
        self._snapshot: Callable[[], JSON | None] | None = None

    def track(self, snapshot: Callable[[], JSON | None]) -> None:
        self._snapshot = snapshot

    def value(self) -> JSON | None:
        """The progress to save now; None: nothing new (the job's saved progress stays)."""
        if self._snapshot is None:
            return None
        try:
            return self._snapshot()
        except Exception:
            log.exception("asyncq: a job's progress could not be read; it is not saved")
            return None


RunFn = Callable[[Job, Checkpoint], Awaitable[JSON]]
PressureFn = Callable[[int], int]   # running jobs (not yet yielding) -> how many must yield now


def _no_pressure(running: int) -> int:
    return 0


@dataclass
class _Held:
    """A running job: its current lease; `lost` once a renewal was refused; `preempted` once
    `preempt()` chose it; `recording` once its run ended (too late to preempt)."""
    job: Job
    lease: Lease
    checkpoint: Checkpoint
    task: asyncio.Task | None = None
    lost: bool = False
    preempted: bool = False
    recording: bool = False


class Dispatcher:
    def __init__(self, queue: JobQueue, run: RunFn, headroom: Callable[[], bool],
                 config: DispatcherConfig, pressure: PressureFn = _no_pressure) -> None:
        if not 0 < config.renew_every_s < config.lease_s:
            raise ValueError("renew_every_s must be positive and below lease_s")
        self._queue = queue
        self._run = run
        self._headroom = headroom
        self._pressure = pressure
        self._cfg = config
        self._running: dict[str, _Held] = {}   # job id -> the running job, in start order
        self.preemptions = 0                   # jobs sent back to the queue by preempt()
        # how this dispatcher's runs ended: completed (result recorded), failed (error recorded,
        # retried while attempts remain), requeued (preempted or stopped), lost (lease gone,
        # nothing recorded: another owner may run the job)
        self.outcomes: Counter[str] = Counter()
        self._wake = asyncio.Event()
        self._stopping = False
        self._preempted = False      # a run was preempted: wait one idle poll before taking more
        self._loop_task: asyncio.Task | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop(), name=f"dispatcher-{self._cfg.owner}")

    def wake(self) -> None:
        """Look at the queue now (e.g. after an enqueue in this process, or load went down)."""
        self._wake.set()

    def check_pressure(self) -> int:
        """Ask `pressure()` now (e.g. an interactive request just arrived) and preempt that many
        running jobs; -> how many were preempted."""
        live = self._preemptible()
        n = self._pressure(len(live)) if live else 0
        return self.preempt(n) if n > 0 else 0

    def _preemptible(self) -> list[_Held]:
        """Running jobs not yet on their way out, in start order."""
        return [h for h in self._running.values()
                if not (h.preempted or h.lost or h.recording) and h.task is not None]

    def preempt(self, n: int) -> int:
        """Send up to n running jobs back to the queue (lowest priority first, then newest),
        without counting an attempt; -> how many. Their runs are cancelled at once; the requeue
        is recorded by their own tasks."""
        live = self._preemptible()
        order = {id(h): i for i, h in enumerate(live)}     # start order
        victims = sorted(live, key=lambda h: (-h.job.priority, -order[id(h)]))[:max(0, n)]
        for h in victims:
            h.preempted = True
            h.task.cancel()
        self.preemptions += len(victims)
        if victims:
            self._preempted = True
        return len(victims)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Take nothing more; give running jobs `grace_s` to finish, then cancel them and put
        them back on the queue (another dispatcher takes them at once, with no lease wait)."""
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            await self._loop_task
        tasks = [h.task for h in self._running.values() if h.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self) -> None:
        while not self._stopping:
            self.check_pressure()
            free = self._cfg.max_concurrency - len(self._running)
            claims: list[Claim] = []
            preempted, self._preempted = self._preempted, False
            if free > 0 and not preempted and self._headroom():
                try:
                    claims = await self._queue.take(min(free, self._cfg.take_batch),
                                                    self._cfg.owner, self._cfg.lease_s)
                except Exception:
                    log.exception("asyncq: take failed; trying again in %.1f s", self._cfg.idle_poll_s)
            for claim in claims:
                held = _Held(claim.job, claim.lease, Checkpoint())
                self._running[claim.job.id] = held
                held.task = asyncio.create_task(self._run_one(held))
            if claims and not self._stopping:
                await asyncio.sleep(0)   # let the runs start (and count in the load) ...
                continue                 # ... before headroom() is asked again
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._cfg.idle_poll_s)
            except asyncio.TimeoutError:
                pass

    async def _run_one(self, held: _Held) -> None:
        """Runs `run(job)` in this task (so it starts at once), renewing the lease beside it."""
        job = held.job
        renewer = asyncio.create_task(self._keep_leased(held, asyncio.current_task()))
        try:
            try:
                outcome: JSON | BaseException = await self._run(job, held.checkpoint)
            except asyncio.CancelledError:
                if not (held.lost or held.preempted):
                    raise                  # stop(): handled below
                asyncio.current_task().uncancel()
                if held.lost:
                    self.outcomes["lost"] += 1
                    return                 # the lease is gone: nothing to record
                outcome = Preempted()      # preempt(): back to the queue, attempt not counted
            except Exception as exc:
                outcome = exc
            held.recording = True
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            await self._record(held, outcome)
        except asyncio.CancelledError:     # stop(): put the job back for another dispatcher
            renewer.cancel()
            if not held.lost:
                self.outcomes["requeued"] += 1
                await asyncio.shield(self._queue.requeue(held.lease, held.checkpoint.value()))
            raise
        except Exception:
            log.exception("asyncq: recording job %s failed; its lease will expire", job.id)
        finally:
            renewer.cancel()
            self._running.pop(job.id, None)
            self._wake.set()

    async def _keep_leased(self, held: "_Held", runner: asyncio.Task) -> None:
        while True:
            await asyncio.sleep(self._cfg.renew_every_s)
            try:
                renewed = await self._queue.renew(held.lease, self._cfg.lease_s,
                                                  held.checkpoint.value())
            except Exception:
                log.exception("asyncq: renewing job %s failed; retrying", held.lease.job_id)
                continue
            if renewed is None:            # cancelled, or expired and maybe someone else's now
                held.lost = True
                runner.cancel()
                return
            held.lease = renewed

    async def _record(self, held: _Held, outcome: JSON | BaseException) -> None:
        lease = held.lease
        exc = outcome if isinstance(outcome, BaseException) else None
        if exc is None:
            if await self._queue.complete(lease, outcome):
                self.outcomes["completed"] += 1
            else:
                self.outcomes["lost"] += 1
                log.warning("asyncq: job %s finished after its lease was lost; result dropped",
                            lease.job_id)
        elif isinstance(exc, Preempted):
            self._preempted = True
            self.outcomes["requeued"] += 1
            await self._queue.requeue(lease, held.checkpoint.value(), exc.delay_s)
        elif isinstance(exc, JobFailed):
            self.outcomes["failed"] += 1
            await self._queue.fail(lease, exc.error, exc.retryable, self._cfg.retry_delay_s)
        else:
            error = {"message": f"{type(exc).__name__}: {exc}", "type": "internal_error",
                     "trace": "".join(traceback.format_exception(exc))[-2000:]}
            self.outcomes["failed"] += 1
            await self._queue.fail(lease, error, True, self._cfg.retry_delay_s)
