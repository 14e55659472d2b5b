"""The JobQueue invariants (tandem/asyncq/queue.py), the same tests on SQLite, Redis and
PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from tandem.asyncq.event import EventType, SubscriptionSpec
from tandem.asyncq.job import BatchSpec, JobSpec, JobStatus
from tandem.asyncq.open_queue import open_queue


def spec(n: int = 2, key: str | None = None, account: str = "acct", priority: int = 0,
         max_attempts: int = 3) -> BatchSpec:
    return BatchSpec(account=account, model="@cf/demo/model", key=key, priority=priority,
                     max_attempts=max_attempts,
                     jobs=tuple(JobSpec({"prompt": f"p{i}"}, f"ref{i}") for i in range(n)))


def run(coro_fn, target: str):
    async def main():
        q = open_queue(target)
        try:
            return await coro_fn(q)
        finally:
            await q.close()
    return asyncio.run(main())


def test_enqueue_is_idempotent_by_account_and_key(queue_target):
    async def body(q):
        first, created = await q.enqueue(spec(3, key="k1"))
        again, created_again = await q.enqueue(spec(5, key="k1"))
        other, _ = await q.enqueue(spec(1, key="k1", account="other"))
        unkeyed1, _ = await q.enqueue(spec(1))
        unkeyed2, _ = await q.enqueue(spec(1))
        assert created and not created_again
        assert again.id == first.id and again.total == 3
        assert other.id != first.id and unkeyed1.id != unkeyed2.id
        jobs = await q.list_batch(first.id)
        assert [j.index for j in jobs] == [0, 1, 2]
        assert [j.external_reference for j in jobs] == ["ref0", "ref1", "ref2"]
        assert all(j.status is JobStatus.QUEUED and j.attempts == 0 for j in jobs)
        assert jobs[1].body == {"prompt": "p1"}
        assert [b.id for b in await q.list_batches("acct")] == [unkeyed2.id, unkeyed1.id, first.id]
        assert [b.id for b in await q.list_batches("other")] == [other.id]
        # the second enqueue added no job: 3 + 1 + 1 + 1 takeable in all
        assert len(await q.take(100, "o", 30)) == 6
    run(body, queue_target)


def test_take_orders_by_priority_then_enqueue_order(queue_target):
    async def body(q):
        low, _ = await q.enqueue(spec(2, priority=5))
        high, _ = await q.enqueue(spec(2, priority=-1))
        claims = await q.take(3, "o", 30)
        assert [(c.job.batch_id, c.job.index) for c in claims] == [
            (high.id, 0), (high.id, 1), (low.id, 0)]
        assert all(c.job.status is JobStatus.RUNNING and c.job.owner == "o" for c in claims)
        assert all(c.lease.attempt == 1 for c in claims)
    run(body, queue_target)


def test_result_recorded_exactly_once(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(1))
        (claim,) = await q.take(1, "o", 30)
        assert await q.complete(claim.lease, {"response": "a"})
        assert not await q.complete(claim.lease, {"response": "b"})
        assert await q.fail(claim.lease, {"message": "x"}, True) is None
        assert not await q.requeue(claim.lease)
        job = await q.get(claim.job.id)
        assert job.status is JobStatus.SUCCEEDED and job.result == {"response": "a"}
        assert job.finished_at is not None and job.owner is None
        done = await q.get_batch(batch.id)
        assert done.done and done.status == "succeeded" and done.succeeded == 1
        assert await q.take(1, "o", 30) == []
    run(body, queue_target)


def test_expired_lease_is_taken_up_by_another_owner(queue_target):
    async def body(q):
        await q.enqueue(spec(1))
        (crashed,) = await q.take(1, "gateway-a", 0.3)   # gateway-a then dies
        assert await q.take(1, "gateway-b", 30) == []     # still leased
        await asyncio.sleep(0.5)
        (taken,) = await q.take(1, "gateway-b", 30)
        assert taken.job.id == crashed.job.id and taken.lease.attempt == 2
        # the crashed owner wakes up late: refused everywhere, even renewal
        assert await q.renew(crashed.lease, 30) is None
        assert not await q.complete(crashed.lease, {"response": "late"})
        assert await q.complete(taken.lease, {"response": "b"})
        assert (await q.get(taken.job.id)).result == {"response": "b"}
    run(body, queue_target)


def test_expired_lease_of_same_owner_is_fenced_by_attempt(queue_target):
    async def body(q):
        await q.enqueue(spec(1))
        (old,) = await q.take(1, "o", 0.3)
        await asyncio.sleep(0.5)
        assert not await q.complete(old.lease, {"response": "expired"})
        (new,) = await q.take(1, "o", 30)
        assert not await q.complete(old.lease, {"response": "stale"})
        assert await q.complete(new.lease, {"response": "fresh"})
    run(body, queue_target)


def test_renew_keeps_a_job_leased(queue_target):
    async def body(q):
        await q.enqueue(spec(1))
        (claim,) = await q.take(1, "o", 0.4)
        lease = claim.lease
        for _ in range(3):
            await asyncio.sleep(0.2)
            lease = await q.renew(lease, 0.4)
            assert lease is not None
        assert await q.take(1, "other", 30) == []
        assert await q.complete(lease, {"ok": True})
    run(body, queue_target)


def test_fail_retries_then_fails_for_good(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(1, max_attempts=2))
        (c1,) = await q.take(1, "o", 30)
        assert await q.fail(c1.lease, {"message": "worker died"}, True) is JobStatus.QUEUED
        (c2,) = await q.take(1, "o", 30)
        assert c2.lease.attempt == 2
        assert await q.fail(c2.lease, {"message": "again"}, True) is JobStatus.FAILED
        job = await q.get(c2.job.id)
        assert job.status is JobStatus.FAILED and job.error == {"message": "again"}
        assert (await q.get_batch(batch.id)).status == "failed"
    run(body, queue_target)


def test_fail_not_retryable_and_retry_delay(queue_target):
    async def body(q):
        await q.enqueue(spec(2))
        c1, c2 = await q.take(2, "o", 30)
        assert await q.fail(c1.lease, {"message": "bad request"}, False) is JobStatus.FAILED
        assert await q.fail(c2.lease, {"message": "busy"}, True, retry_delay_s=0.4) is JobStatus.QUEUED
        assert await q.take(1, "o", 30) == []   # not before the delay
        await asyncio.sleep(0.5)
        (again,) = await q.take(1, "o", 30)
        assert again.job.id == c2.job.id
    run(body, queue_target)


def test_requeue_on_preemption_does_not_count_an_attempt(queue_target):
    async def body(q):
        await q.enqueue(spec(1, max_attempts=1))
        for _ in range(3):
            (claim,) = await q.take(1, "o", 30)
            assert claim.lease.attempt == 1
            assert await q.requeue(claim.lease)
            assert (await q.get(claim.job.id)).status is JobStatus.QUEUED
        (claim,) = await q.take(1, "o", 30)
        assert await q.complete(claim.lease, {"ok": 1})
    run(body, queue_target)


def test_lease_expiring_on_last_attempt_fails_the_job(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(1, max_attempts=1))
        (claim,) = await q.take(1, "o", 0.2)
        await asyncio.sleep(0.4)
        assert await q.take(1, "o", 30) == []
        job = await q.get(claim.job.id)
        assert job.status is JobStatus.FAILED and job.error["type"] == "lease_expired"
        assert (await q.get_batch(batch.id)).failed == 1
    run(body, queue_target)


def test_cancel_stops_queued_and_running_jobs(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(3))
        (running,) = await q.take(1, "o", 30)
        assert await q.cancel(batch.id) == 3
        assert await q.cancel(batch.id) == 0
        assert await q.renew(running.lease, 30) is None
        assert not await q.complete(running.lease, {"late": True})
        assert all(j.status is JobStatus.CANCELLED for j in await q.list_batch(batch.id))
        assert await q.take(10, "o", 30) == []
        done = await q.get_batch(batch.id)
        assert done.done and done.cancelled == 3 and done.status == "failed"
    run(body, queue_target)


def test_batch_events_recorded_once_with_a_delivery_per_subscription(queue_target):
    async def body(q):
        all_types = await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/a"))
        only_done = await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/b",
                                                       (EventType.SUCCEEDED,), secret="s3cret"))
        await q.subscribe(SubscriptionSpec("elsewhere", "http://127.0.0.1:1/c"))
        assert only_done.secret == "s3cret" and len(all_types.secret) == 64
        assert [s.id for s in await q.subscriptions("acct")] == [all_types.id, only_done.id]
        batch, _ = await q.enqueue(spec(2))
        await q.enqueue(spec(2, account="nobody"))
        for claim in await q.take(2, "o", 30):
            assert await q.complete(claim.lease, {"ok": 1})
        deliveries = await q.take_deliveries(10, 30)
        got = sorted((d.subscription_id, d.event.type) for d in deliveries)
        assert got == sorted([(all_types.id, EventType.QUEUED), (all_types.id, EventType.SUCCEEDED),
                              (only_done.id, EventType.SUCCEEDED)])
        end = next(d for d in deliveries if d.event.type is EventType.SUCCEEDED)
        assert end.event.batch_id == batch.id and end.attempts == 1
        assert end.event.payload == {"requestId": batch.id, "total": 2, "succeeded": 2,
                                     "failed": 0, "cancelled": 0}
        assert await q.take_deliveries(10, 30) == []   # leased, not due again yet
        events = await q.batch_events(batch.id)
        assert [e.type for e in events] == [EventType.QUEUED, EventType.SUCCEEDED]
        assert events[1].payload["succeeded"] == 2 and events[0].created_at <= events[1].created_at
        assert await q.unsubscribe(only_done.id) and not await q.unsubscribe(only_done.id)
    run(body, queue_target)


def test_delivery_retry_dead_letter_and_fencing(queue_target):
    async def body(q):
        await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/x", (EventType.QUEUED,)))
        await q.enqueue(spec(1))
        (d1,) = await q.take_deliveries(5, 30)
        assert await q.finish_delivery(d1, False, "HTTP 500", retry_in_s=0.2)
        await asyncio.sleep(0.3)
        (d2,) = await q.take_deliveries(5, 0.2)                     # a notifier that dies
        await asyncio.sleep(0.3)
        (d3,) = await q.take_deliveries(5, 30)                      # taken up again
        assert (d2.attempts, d3.attempts) == (2, 3)
        assert not await q.finish_delivery(d2, True, None, None)   # fenced by attempts
        assert await q.finish_delivery(d3, False, "connection refused", retry_in_s=None)
        (dead,) = await q.dead_letters("acct")
        assert dead.id == d1.id and dead.last_error == "connection refused" and dead.attempts == 3
        await asyncio.sleep(0.1)
        assert await q.take_deliveries(5, 30) == []
    run(body, queue_target)


def test_empty_batch_is_done_at_once(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(0))
        assert batch.done and batch.status == "succeeded"
    run(body, queue_target)


def test_state_survives_reopening(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(2, key="durable"))
        return batch

    batch = run(body, queue_target)

    async def reopened(q):
        again, created = await q.enqueue(spec(2, key="durable"))
        assert not created and again.id == batch.id
        assert len(await q.take(5, "o", 30)) == 2
    run(reopened, queue_target)


def test_uploaded_files_are_stored_listed_and_deleted(queue_target):
    async def body(q):
        text = '{"custom_id": "a"}\n{"custom_id": "é"}\n'
        f1 = await q.put_file("acct", "batch", "in.jsonl", text)
        f2 = await q.put_file("acct", "batch", "two.jsonl", "{}\n")
        await q.put_file("other", "batch", "x.jsonl", "{}\n")
        assert f1.id.startswith("file-") and f1.bytes == len(text.encode())
        got = await q.get_file(f1.id, with_content=True)
        assert got.content == text and got.filename == "in.jsonl" and got.purpose == "batch"
        assert (await q.get_file(f1.id)).content is None
        assert [f.id for f in await q.list_files("acct")] == [f1.id, f2.id]
        assert await q.delete_file(f1.id) and not await q.delete_file(f1.id)
        assert await q.get_file(f1.id) is None
        assert [f.id for f in await q.list_files("acct")] == [f2.id]
    run(body, queue_target)


def test_progress_is_saved_by_requeue_and_renew_and_kept_otherwise(queue_target):
    saved = {"outputs": [{"new_token_ids": [5, 6, 7], "new_text": "a\u00e9\U0001f600"}], "n": 1}

    async def body(q):
        await q.enqueue(spec(1, max_attempts=3))
        (claim,) = await q.take(1, "o", 30)
        assert claim.job.progress is None
        assert await q.requeue(claim.lease, saved)
        assert (await q.get(claim.job.id)).progress == saved
        (claim,) = await q.take(1, "o", 30)
        assert claim.job.progress == saved              # the next run is handed it
        assert await q.requeue(claim.lease)             # None: the saved progress stays
        (claim,) = await q.take(1, "o", 30)
        assert claim.job.progress == saved
        more = {**saved, "n": 2}
        lease = await q.renew(claim.lease, 30, more)
        assert lease is not None and (await q.get(claim.job.id)).progress == more
        assert await q.renew(claim.lease, 30) is not None
        assert (await q.get(claim.job.id)).progress == more
        assert await q.fail(lease, {"message": "x"}, True) is JobStatus.QUEUED
        (claim,) = await q.take(1, "o", 30)
        assert claim.job.progress == more               # a retry continues from it too
        assert not await q.requeue(lease, {"stale": True})   # an old lease saves nothing
        assert await q.renew(lease, 30, {"stale": True}) is None
        assert (await q.get(claim.job.id)).progress == more
        assert await q.requeue(claim.lease, {**more, "n": 3})
    run(body, queue_target)

    async def reopened(q):
        (job,) = [j for b in await q.list_batches("acct") for j in await q.list_batch(b.id)]
        assert job.progress == {**saved, "n": 3}         # durable
        (claim,) = await q.take(1, "o", 30)
        assert claim.job.progress == {**saved, "n": 3}
        assert await q.complete(claim.lease, {"done": True})
        assert (await q.get(job.id)).progress is None    # the result supersedes it
    run(reopened, queue_target)


def test_progress_is_removed_when_a_job_fails_or_is_cancelled(queue_target):
    async def body(q):
        failing, _ = await q.enqueue(spec(1, max_attempts=1))
        (claim,) = await q.take(1, "o", 30)
        assert await q.renew(claim.lease, 30, {"n": 1})
        assert await q.fail(claim.lease, {"message": "x"}, True) is JobStatus.FAILED
        assert (await q.get(claim.job.id)).progress is None
        expiring, _ = await q.enqueue(spec(1, max_attempts=1))
        (claim,) = await q.take(1, "o", 0.3)
        assert await q.renew(claim.lease, 0.3, {"n": 2})
        await asyncio.sleep(0.5)
        assert await q.take(1, "o", 30) == []              # reaped: its last attempt expired
        assert (await q.get(claim.job.id)).progress is None
        cancelled, _ = await q.enqueue(spec(1))
        (claim,) = await q.take(1, "o", 30)
        assert await q.requeue(claim.lease, {"n": 3})
        assert await q.cancel(cancelled.id) == 1
        assert (await q.get(claim.job.id)).progress is None
    run(body, queue_target)


def test_a_store_from_before_progress_gets_the_column(queue_target):
    """SQL stores created before the progress column get it when opened (Redis has no schema)."""
    from tandem.asyncq.sql_schema import SCHEMA
    if queue_target.startswith("redis://"):
        pytest.skip("a Redis job is a hash: a new field needs no migration")
    old_jobs = SCHEMA[1].replace(", progress TEXT", "")
    assert old_jobs != SCHEMA[1]
    if queue_target.startswith("postgresql://"):
        import psycopg
        conn = psycopg.connect(queue_target, autocommit=True)
    else:
        import sqlite3
        conn = sqlite3.connect(queue_target, isolation_level=None)
    for stmt in (SCHEMA[0], old_jobs, *SCHEMA[2:]):
        conn.execute(stmt)
    conn.close()

    async def body(q):
        await q.enqueue(spec(1))
        (claim,) = await q.take(1, "o", 30)
        assert await q.requeue(claim.lease, {"k": 1})
        assert (await q.get(claim.job.id)).progress == {"k": 1}
    run(body, queue_target)
    run(body, queue_target)    # opening again: the column is there, nothing to add


def test_processes_opening_a_new_store_at_once_all_succeed(queue_target):
    """Two gateways started together on one new store both create its schema: neither fails (on
    PostgreSQL, CREATE ... IF NOT EXISTS alone races on the catalog), and the store works."""
    import threading

    rounds, openers = 3, 4
    for round_ in range(rounds):
        if round_ and queue_target.startswith("postgresql://"):
            _drop_tables(queue_target)
        barrier = threading.Barrier(openers)
        errors: list[BaseException] = []

        def open_once() -> None:
            async def main():
                barrier.wait(timeout=30)
                q = open_queue(queue_target)
                await q.close()
            try:
                asyncio.run(main())
            except BaseException as exc:  # noqa: BLE001 (collected and asserted below)
                errors.append(exc)

        threads = [threading.Thread(target=open_once) for _ in range(openers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors

    async def body(q):
        batch, _ = await q.enqueue(spec(2))
        assert len(await q.take(2, "o", 30)) == 2
        assert (await q.get_batch(batch.id)).total == 2
    run(body, queue_target)


def _drop_tables(target: str) -> None:
    """Empty the PostgreSQL database again, so the next round races on creating the schema."""
    import psycopg
    with psycopg.connect(target, autocommit=True) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'asyncq_%'").fetchall()]
        conn.execute(f"DROP TABLE IF EXISTS {', '.join(names)}")
