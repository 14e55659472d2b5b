"""The dispatcher on real stores: exactly-once under two dispatchers, headroom gating, lease
renewal, preemption, a crashed owner's job taken up, failures, cancel, clean stop."""

from __future__ import annotations

import asyncio
import collections
import time

from tandem.asyncq.dispatcher import Dispatcher, DispatcherConfig, JobFailed, Preempted
from tandem.asyncq.job import ANONYMOUS, BatchSpec, Job, JobSpec, JobStatus
from tandem.asyncq.open_queue import open_queue


def spec(n: int, max_attempts: int = 3) -> BatchSpec:
    return BatchSpec(account="acct", model="m", max_attempts=max_attempts,
                     jobs=tuple(JobSpec({"i": i}) for i in range(n)))


def config(owner: str, **kw) -> DispatcherConfig:
    base = dict(owner=owner, max_concurrency=4, lease_s=2.0, renew_every_s=0.5, idle_poll_s=0.05,
                retry_delay_s=0.0)
    base.update(kw)
    return DispatcherConfig(**base)


async def until(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def batch_done(q, batch_id):
    async def cond():
        return (await q.get_batch(batch_id, ANONYMOUS)).done
    return cond


def test_two_dispatchers_never_run_a_job_twice(queue_target):
    async def main():
        qa, qb, qc = open_queue(queue_target), open_queue(queue_target), open_queue(queue_target)
        runs: collections.Counter[str] = collections.Counter()
        by_owner: collections.Counter[str] = collections.Counter()

        def runner(owner):
            async def run(job: Job, checkpoint):
                runs[job.id] += 1
                by_owner[owner] += 1
                await asyncio.sleep(0.03)
                return {"echo": job.body["i"], "by": owner}
            return run

        batch, _ = await qc.enqueue(spec(40))
        a = Dispatcher(qa, runner("a"), lambda: True, config("a"))
        b = Dispatcher(qb, runner("b"), lambda: True, config("b"))
        a.start(), b.start()
        await until(batch_done(qc, batch.id))
        await a.stop(), await b.stop()
        jobs = await qc.list_batch(batch.id, ANONYMOUS)
        assert all(j.status is JobStatus.SUCCEEDED and j.attempts == 1 for j in jobs)
        assert [j.result["echo"] for j in jobs] == list(range(40))
        assert sorted(runs) == sorted(j.id for j in jobs) and set(runs.values()) == {1}
        assert by_owner["a"] > 0 and by_owner["b"] > 0
        assert (a.outcomes, b.outcomes) == ({"completed": by_owner["a"]}, {"completed": by_owner["b"]})
        for q in (qa, qb, qc):
            await q.close()
    asyncio.run(main())


def test_no_job_taken_without_headroom(tmp_path):
    async def main():
        q = open_queue(str(tmp_path / "q.db"))
        room = {"free": False}
        started = []

        async def run(job, checkpoint):
            started.append(job.id)
            room["free"] = False   # the pools fill up with this job
            return {}

        batch, _ = await q.enqueue(spec(3))
        d = Dispatcher(q, run, lambda: room["free"], config("a"))
        d.start()
        await asyncio.sleep(0.4)
        assert started == [] and all(j.status is JobStatus.QUEUED for j in await q.list_batch(batch.id, ANONYMOUS))
        room["free"] = True
        await until(lambda: _true(len(started) == 1))
        await asyncio.sleep(0.3)
        assert len(started) == 1   # headroom went away after one take
        room["free"] = True
        await until(lambda: _true(len(started) == 2))
        await d.stop()
        await q.close()
    asyncio.run(main())


async def _true(value: bool) -> bool:
    return value


def test_lease_renewed_while_a_long_job_runs(queue_target):
    async def main():
        qa, qb = open_queue(queue_target), open_queue(queue_target)
        runs: collections.Counter[str] = collections.Counter()

        async def slow(job, checkpoint):
            runs[job.id] += 1
            await asyncio.sleep(1.0)   # 2.5 leases
            return {"ok": True}

        batch, _ = await qa.enqueue(spec(1))
        a = Dispatcher(qa, slow, lambda: True, config("a", lease_s=0.4, renew_every_s=0.1))
        a.start()
        await until(lambda: _true(sum(runs.values()) == 1))
        b = Dispatcher(qb, slow, lambda: True, config("b", lease_s=0.4, renew_every_s=0.1))
        b.start()
        await until(batch_done(qa, batch.id))
        await a.stop(), await b.stop()
        assert list(runs.values()) == [1]
        (job,) = await qa.list_batch(batch.id, ANONYMOUS)
        assert job.status is JobStatus.SUCCEEDED and job.attempts == 1
        await qa.close(), await qb.close()
    asyncio.run(main())


def test_preempted_job_goes_back_to_the_queue(tmp_path):
    async def main():
        q = open_queue(str(tmp_path / "q.db"))
        calls: collections.Counter[str] = collections.Counter()

        async def run(job, checkpoint):
            calls[job.id] += 1
            if calls[job.id] == 1:
                raise Preempted()
            return {"done": calls[job.id]}

        batch, _ = await q.enqueue(spec(3, max_attempts=1))
        d = Dispatcher(q, run, lambda: True, config("a"))
        d.start()
        await until(batch_done(q, batch.id))
        await d.stop()
        jobs = await q.list_batch(batch.id, ANONYMOUS)
        assert all(j.status is JobStatus.SUCCEEDED and j.result == {"done": 2} for j in jobs)
        assert all(j.attempts == 1 for j in jobs)   # preemption did not count
        assert d.outcomes == {"requeued": 3, "completed": 3}
        await q.close()
    asyncio.run(main())


def test_crashed_owners_job_is_taken_up(queue_target):
    async def main():
        q = open_queue(queue_target)
        batch, _ = await q.enqueue(spec(2))
        crashed = await q.take(2, "dead-gateway", 0.3)   # never finished: its process died
        assert len(crashed) == 2
        ran = []

        async def run(job, checkpoint):
            ran.append(job.id)
            return {"ok": 1}

        d = Dispatcher(q, run, lambda: True, config("alive"))
        d.start()
        await until(batch_done(q, batch.id))
        await d.stop()
        assert sorted(ran) == sorted(c.job.id for c in crashed)
        assert all(j.attempts == 2 and j.status is JobStatus.SUCCEEDED
                   for j in await q.list_batch(batch.id, ANONYMOUS))
        await q.close()
    asyncio.run(main())


def test_failures_retry_until_attempts_are_spent(tmp_path):
    async def main():
        q = open_queue(str(tmp_path / "q.db"))
        calls: collections.Counter[int] = collections.Counter()

        async def run(job, checkpoint):
            i = job.body["i"]
            calls[i] += 1
            if i == 0:
                raise JobFailed({"message": "prompt too long", "code": 413})
            if i == 1:
                raise ConnectionError("worker went away")
            if calls[i] < 2:
                raise ConnectionError("flaky")
            return {"ok": i}

        batch, _ = await q.enqueue(spec(3, max_attempts=3))
        d = Dispatcher(q, run, lambda: True, config("a"))
        d.start()
        await until(batch_done(q, batch.id))
        await d.stop()
        j0, j1, j2 = await q.list_batch(batch.id, ANONYMOUS)
        assert (j0.status, j0.attempts, j0.error["code"]) == (JobStatus.FAILED, 1, 413)
        assert (j1.status, j1.attempts) == (JobStatus.FAILED, 3)
        assert "worker went away" in j1.error["message"]
        assert (j2.status, j2.attempts, j2.result) == (JobStatus.SUCCEEDED, 2, {"ok": 2})
        assert dict(calls) == {0: 1, 1: 3, 2: 2}
        assert d.outcomes == {"failed": 5, "completed": 1}
        await q.close()
    asyncio.run(main())


def test_cancel_stops_a_running_job(tmp_path):
    async def main():
        q = open_queue(str(tmp_path / "q.db"))
        cancelled = asyncio.Event()

        async def run(job, checkpoint):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return {}

        batch, _ = await q.enqueue(spec(1))
        d = Dispatcher(q, run, lambda: True, config("a", lease_s=1.0, renew_every_s=0.1))
        d.start()
        await until(lambda: _true(d.running == 1))
        assert await q.cancel(batch.id, ANONYMOUS) == 1
        await asyncio.wait_for(cancelled.wait(), 5)
        await until(lambda: _true(d.running == 0))
        await d.stop()
        (job,) = await q.list_batch(batch.id, ANONYMOUS)
        assert job.status is JobStatus.CANCELLED and job.result is None
        assert d.outcomes == {"lost": 1}
        await q.close()
    asyncio.run(main())


def test_stop_puts_running_jobs_back(tmp_path):
    async def main():
        q = open_queue(str(tmp_path / "q.db"))

        async def forever(job, checkpoint):
            await asyncio.sleep(30)

        batch, _ = await q.enqueue(spec(2))
        d = Dispatcher(q, forever, lambda: True, config("a"))
        d.start()
        await until(lambda: _true(d.running == 2))
        t0 = time.monotonic()
        await d.stop(grace_s=0.1)
        assert time.monotonic() - t0 < 2
        jobs = await q.list_batch(batch.id, ANONYMOUS)
        assert all(j.status is JobStatus.QUEUED and j.attempts == 0 and j.owner is None
                   for j in jobs)
        assert len(await q.take(5, "next", 30)) == 2   # takeable at once, no lease wait
        assert d.outcomes == {"requeued": 2}
        await q.close()
    asyncio.run(main())


def test_pressure_preempts_running_jobs_lowest_priority_then_newest(tmp_path):
    async def main():
        q = open_queue(str(tmp_path / "q.db"))
        started: list[str] = []
        cancelled: list[str] = []
        gate = {"keep": 3, "open": True}   # pressure: at most `keep` jobs may run

        async def run(job, checkpoint):
            started.append(job.body["name"])
            try:
                await asyncio.sleep(30 if len(started) <= 3 else 0)
            except asyncio.CancelledError:
                cancelled.append(job.body["name"])
                raise
            return {"name": job.body["name"]}

        def batch(name: str, priority: int) -> BatchSpec:
            return BatchSpec(account="acct", model="m", priority=priority, max_attempts=1,
                             jobs=(JobSpec({"name": name}),))

        for name, prio in (("old-low", 5), ("high", 0), ("new-low", 5)):
            await q.enqueue(batch(name, prio))
        d = Dispatcher(q, run, lambda: gate["open"], config("a"),
                       pressure=lambda running: max(0, running - gate["keep"]))
        d.start()
        await until(lambda: _true(d.running == 3))
        assert started == ["high", "old-low", "new-low"]       # taken in priority order
        gate["open"] = False
        assert d.check_pressure() == 0                         # no pressure: nothing yields
        gate["keep"] = 1
        assert d.check_pressure() == 2
        await until(lambda: _true(d.running == 1))
        assert cancelled == ["new-low", "old-low"] and d.preemptions == 2
        jobs = {j.body["name"]: j for b in await q.list_batches("acct", ANONYMOUS) for j in await q.list_batch(b.id, ANONYMOUS)}
        assert all(jobs[n].status is JobStatus.QUEUED and jobs[n].attempts == 0
                   for n in ("old-low", "new-low"))                  # back, no attempt counted
        gate["keep"], gate["open"] = 3, True
        await until(lambda: _true(sum(1 for n in started if n.endswith("low")) == 4))
        await until(lambda: _true(d.running == 1))             # the two low ones finished
        for b in await q.list_batches("acct", ANONYMOUS):
            for j in await q.list_batch(b.id, ANONYMOUS):
                if j.body["name"] != "high":
                    assert (j.status, j.attempts) == (JobStatus.SUCCEEDED, 1)   # max_attempts=1
        await d.stop(grace_s=0.1)
        await q.close()
    asyncio.run(main())


def test_preempted_and_renewed_jobs_save_their_checkpoint(queue_target):
    async def main():
        q = open_queue(queue_target)
        seen: list = []
        produced = {"n": 0}

        async def run(job, checkpoint):
            seen.append(job.progress)
            start = (job.progress or {}).get("n", 0)
            produced["n"] = start
            checkpoint.track(lambda: {"n": produced["n"]})
            for _ in range(100):
                await asyncio.sleep(0.02)
                produced["n"] += 1
                if produced["n"] == start + 20 and len(seen) < 3:
                    await asyncio.sleep(30)     # preempted here
            return {"n": produced["n"]}

        batch, _ = await q.enqueue(spec(1, max_attempts=1))
        d = Dispatcher(q, run, lambda: True, config("a", lease_s=1.0, renew_every_s=0.2))
        d.start()
        for k in (1, 2):
            await until(lambda: _true(len(seen) == k and produced["n"] == 20 * k))
            if k == 1:    # the lease was renewed with the progress meanwhile
                (job,) = await q.list_batch(batch.id, ANONYMOUS)
                assert 0 < job.progress["n"] <= 20
            assert d.preempt(1) == 1
        await until(batch_done(q, batch.id))
        await d.stop()
        assert seen == [None, {"n": 20}, {"n": 40}]
        (job,) = await q.list_batch(batch.id, ANONYMOUS)
        assert job.status is JobStatus.SUCCEEDED and job.result == {"n": 140} and job.attempts == 1
        await q.close()
    asyncio.run(main())
