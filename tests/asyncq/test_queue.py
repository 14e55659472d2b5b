"""The JobQueue invariants (tandem/asyncq/queue.py), the same tests on SQLite, Redis and
PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from tandem.asyncq.event import EventType, SubscriptionSpec
from tandem.asyncq.job import ANONYMOUS, BatchSpec, JobSpec, JobStatus
from tandem.asyncq.open_queue import open_queue


def spec(n: int = 2, key: str | None = None, account: str = "acct", priority: int = 0,
         max_attempts: int = 3, tenant: str = ANONYMOUS) -> BatchSpec:
    return BatchSpec(account=account, model="@cf/demo/model", key=key, priority=priority,
                     max_attempts=max_attempts, tenant=tenant,
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
        jobs = await q.list_batch(first.id, ANONYMOUS)
        assert [j.index for j in jobs] == [0, 1, 2]
        assert [j.external_reference for j in jobs] == ["ref0", "ref1", "ref2"]
        assert all(j.status is JobStatus.QUEUED and j.attempts == 0 for j in jobs)
        assert jobs[1].body == {"prompt": "p1"}
        assert [b.id for b in await q.list_batches("acct", ANONYMOUS)] == [unkeyed2.id, unkeyed1.id, first.id]
        assert [b.id for b in await q.list_batches("other", ANONYMOUS)] == [other.id]
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
        done = await q.get_batch(batch.id, ANONYMOUS)
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
        assert (await q.get_batch(batch.id, ANONYMOUS)).status == "failed"
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


def test_requeue_with_a_delay_holds_the_job_back_without_counting_an_attempt(queue_target):
    """A rate-limited job goes back until its limit would fit; other jobs are taken meanwhile."""
    async def body(q):
        await q.enqueue(spec(2, max_attempts=1))
        first, second = await q.take(2, "o", 30)
        assert await q.requeue(first.lease, {"n": 1}, delay_s=0.5)
        assert await q.requeue(second.lease)
        (now,) = await q.take(2, "o", 30)
        assert now.job.id == second.job.id             # the delayed one is not takeable yet
        await asyncio.sleep(0.6)
        (later,) = await q.take(2, "o", 30)
        assert later.job.id == first.job.id and later.lease.attempt == 1
        assert later.job.progress == {"n": 1}
    run(body, queue_target)


def test_lease_expiring_on_last_attempt_fails_the_job(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(1, max_attempts=1))
        (claim,) = await q.take(1, "o", 0.2)
        await asyncio.sleep(0.4)
        assert await q.take(1, "o", 30) == []
        job = await q.get(claim.job.id)
        assert job.status is JobStatus.FAILED and job.error["type"] == "lease_expired"
        assert (await q.get_batch(batch.id, ANONYMOUS)).failed == 1
    run(body, queue_target)


def test_cancel_stops_queued_and_running_jobs(queue_target):
    async def body(q):
        batch, _ = await q.enqueue(spec(3))
        (running,) = await q.take(1, "o", 30)
        assert await q.cancel(batch.id, ANONYMOUS) == 3
        assert await q.cancel(batch.id, ANONYMOUS) == 0
        assert await q.renew(running.lease, 30) is None
        assert not await q.complete(running.lease, {"late": True})
        assert all(j.status is JobStatus.CANCELLED for j in await q.list_batch(batch.id, ANONYMOUS))
        assert await q.take(10, "o", 30) == []
        done = await q.get_batch(batch.id, ANONYMOUS)
        assert done.done and done.cancelled == 3 and done.status == "failed"
    run(body, queue_target)


def test_batch_events_recorded_once_with_a_delivery_per_subscription(queue_target):
    async def body(q):
        all_types = await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/a"))
        only_done = await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/b",
                                                       (EventType.SUCCEEDED,), secret="s3cret"))
        await q.subscribe(SubscriptionSpec("elsewhere", "http://127.0.0.1:1/c"))
        assert only_done.secret == "s3cret" and len(all_types.secret) == 64
        assert [s.id for s in await q.subscriptions("acct", ANONYMOUS)] == [all_types.id, only_done.id]
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
        events = await q.batch_events(batch.id, ANONYMOUS)
        assert [e.type for e in events] == [EventType.QUEUED, EventType.SUCCEEDED]
        assert events[1].payload["succeeded"] == 2 and events[0].created_at <= events[1].created_at
        assert await q.unsubscribe(only_done.id, ANONYMOUS) and not await q.unsubscribe(only_done.id, ANONYMOUS)
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
        (dead,) = await q.dead_letters("acct", ANONYMOUS)
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
        f1 = await q.put_file("acct", "batch", "in.jsonl", text, ANONYMOUS)
        f2 = await q.put_file("acct", "batch", "two.jsonl", "{}\n", ANONYMOUS)
        await q.put_file("other", "batch", "x.jsonl", "{}\n", ANONYMOUS)
        assert f1.id.startswith("file-") and f1.bytes == len(text.encode())
        got = await q.get_file(f1.id, ANONYMOUS, with_content=True)
        assert got.content == text and got.filename == "in.jsonl" and got.purpose == "batch"
        assert (await q.get_file(f1.id, ANONYMOUS)).content is None
        assert [f.id for f in await q.list_files("acct", ANONYMOUS)] == [f1.id, f2.id]
        assert await q.delete_file(f1.id, ANONYMOUS) and not await q.delete_file(f1.id, ANONYMOUS)
        assert await q.get_file(f1.id, ANONYMOUS) is None
        assert [f.id for f in await q.list_files("acct", ANONYMOUS)] == [f2.id]
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
        (job,) = [j for b in await q.list_batches("acct", ANONYMOUS) for j in await q.list_batch(b.id, ANONYMOUS)]
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
        assert await q.cancel(cancelled.id, ANONYMOUS) == 1
        assert (await q.get(claim.job.id)).progress is None
    run(body, queue_target)


A, B = "key-0", "key-1"   # two API keys' tenants


def test_every_client_query_sees_only_its_tenants_objects(queue_target):
    """Batches, jobs, events, files, subscriptions and dead letters of one tenant read as absent for
    another, in the same account and for the anonymous tenant alike; an idempotency key is per
    tenant; events go only to the batch's own tenant's subscriptions."""
    async def body(q):
        a, created_a = await q.enqueue(spec(2, key="k", tenant=A))
        b, created_b = await q.enqueue(spec(1, key="k", tenant=B))
        again, created_again = await q.enqueue(spec(5, key="k", tenant=A))
        assert created_a and created_b and not created_again
        assert again.id == a.id and a.id != b.id and (a.tenant, b.tenant) == (A, B)
        assert (a.key, b.key) == ("k", "k")
        for other in (B, ANONYMOUS):
            assert await q.get_batch(a.id, other) is None
            assert await q.list_batch(a.id, other) == []
            assert await q.batch_events(a.id, other) == []
            assert await q.cancel(a.id, other) == 0
        assert (await q.get_batch(a.id, A)).total == 2 and len(await q.list_batch(a.id, A)) == 2
        assert [x.id for x in await q.list_batches("acct", A)] == [a.id]
        assert [x.id for x in await q.list_batches("acct", B)] == [b.id]
        assert await q.list_batches("acct", ANONYMOUS) == []
        assert all(j.status is JobStatus.QUEUED for j in await q.list_batch(a.id, A))  # not cancelled
        assert [e.type for e in await q.batch_events(a.id, A)] == [EventType.QUEUED]

        sub_a = await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/a", tenant=A))
        sub_b = await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/b", tenant=B))
        assert [x.id for x in await q.subscriptions("acct", A)] == [sub_a.id]
        assert [x.id for x in await q.subscriptions("acct", B)] == [sub_b.id]
        assert await q.subscriptions("acct", ANONYMOUS) == []
        assert not await q.unsubscribe(sub_a.id, B) and not await q.unsubscribe(sub_a.id, ANONYMOUS)
        assert [x.id for x in await q.subscriptions("acct", A)] == [sub_a.id]
        # A's batch ends: its event goes to A's subscription only
        assert await q.cancel(a.id, A) == 2
        deliveries = await q.take_deliveries(10, 30)
        assert {(d.subscription_id, d.event.batch_id) for d in deliveries} == {(sub_a.id, a.id)}
        assert deliveries[0].event.tenant == A
        for d in deliveries:
            assert await q.finish_delivery(d, False, "refused", retry_in_s=None)
        assert [d.subscription_id for d in await q.dead_letters("acct", A)] == [sub_a.id]
        assert await q.dead_letters("acct", B) == [] and await q.dead_letters("acct", ANONYMOUS) == []

        f = await q.put_file("acct", "batch", "in.jsonl", "{}\n", A)
        assert f.tenant == A
        for other in (B, ANONYMOUS):
            assert await q.get_file(f.id, other, with_content=True) is None
            assert await q.list_files("acct", other) == []
            assert not await q.delete_file(f.id, other)
        assert (await q.get_file(f.id, A, with_content=True)).content == "{}\n"
        assert [x.id for x in await q.list_files("acct", A)] == [f.id]
        assert await q.delete_file(f.id, A)
        assert await q.unsubscribe(sub_a.id, A)
    run(body, queue_target)


def test_objects_stored_before_tenants_are_the_anonymous_tenants(queue_target):
    """A store written before objects had tenants: its rows (SQL: the old tables, migrated when
    opened) and hashes (Redis: no tenant field) belong to the anonymous tenant, whom a server
    without keys serves; no key's tenant sees them. New objects keep their tenant."""
    if queue_target.startswith("redis://"):
        _forget_tenants_in_redis(queue_target)   # what the older version wrote, made by this one
    else:
        _old_sql_store(queue_target)

    async def body(q):
        for other in (A, B):
            assert await q.get_batch("old-batch", other) is None
            assert await q.list_batches("acct", other) == []
            assert await q.get_file("file-old", other) is None
            assert await q.subscriptions("acct", other) == []
        old = await q.get_batch("old-batch", ANONYMOUS)
        assert old is not None and old.tenant == ANONYMOUS and old.key == "k"
        assert [x.id for x in await q.list_batch("old-batch", ANONYMOUS)] == ["old-job"]
        assert (await q.get_file("file-old", ANONYMOUS, with_content=True)).content == "{}\n"
        (sub,) = await q.subscriptions("acct", ANONYMOUS)
        again, created = await q.enqueue(spec(1, key="k"))        # the old key still holds
        assert not created and again.id == "old-batch"
        new, created = await q.enqueue(spec(1, key="k", tenant=A))
        assert created and (await q.get_batch(new.id, A)).tenant == A
        (claim,) = [c for c in await q.take(5, "o", 30) if c.job.batch_id == "old-batch"]
        assert await q.complete(claim.lease, {"ok": 1})
        deliveries = await q.take_deliveries(10, 30)
        # the old batch's final event reaches the old (anonymous) subscription; A's queued event none
        assert {(d.subscription_id, d.event.batch_id, d.event.type) for d in deliveries} == \
            {(sub.id, "old-batch", EventType.SUCCEEDED)}
    run(body, queue_target)


def _old_sql_store(target: str) -> None:
    """The tables as released before tenants (no tenant columns), with one anonymous batch of one
    job, a file and a subscription."""
    from tandem.asyncq.sql_schema import SCHEMA
    old = [stmt.replace(", tenant TEXT NOT NULL DEFAULT ''", "").replace("tenant TEXT NOT NULL DEFAULT '', ", "")
           .replace(",\n        tenant TEXT NOT NULL DEFAULT ''", "") for stmt in SCHEMA]
    assert not any("tenant" in stmt for stmt in old)
    rows = [
        "INSERT INTO asyncq_batches (id, account, model, client_key, priority, created_at, total, "
        "succeeded, failed, cancelled, meta) VALUES ('old-batch', 'acct', 'm', 'k', 0, 1.0, 1, 0, 0, 0, '{}')",
        "INSERT INTO asyncq_jobs (id, batch_id, idx, account, model, priority, body, status, attempts, "
        "max_attempts, created_at, available_at) VALUES ('old-job', 'old-batch', 0, 'acct', 'm', 0, "
        "'{}', 'queued', 0, 3, 1.0, 1.0)",
        "INSERT INTO asyncq_files (id, account, purpose, filename, bytes, created_at, content) "
        "VALUES ('file-old', 'acct', 'batch', 'in.jsonl', 3, 1.0, '{}\n')",
        "INSERT INTO asyncq_subscriptions (id, account, url, event_types, secret, created_at) VALUES "
        "('old-sub', 'acct', 'http://127.0.0.1:1/old', 'cf.workersAi.model.batch.succeeded', 's', 1.0)",
    ]
    if target.startswith("postgresql://"):
        import psycopg
        conn = psycopg.connect(target, autocommit=True)
    else:
        import sqlite3
        conn = sqlite3.connect(target, isolation_level=None)
    for stmt in (*old, *rows):
        conn.execute(stmt)
    conn.close()


def _forget_tenants_in_redis(target: str) -> None:
    """Write the same objects through this version as the anonymous tenant, then remove every
    'tenant' field: what the version before tenants left in Redis."""
    import redis

    async def write(q):
        batch, _ = await q.enqueue(spec(1, key="k"))
        f = await q.put_file("acct", "batch", "in.jsonl", "{}\n", ANONYMOUS)
        sub = await q.subscribe(SubscriptionSpec("acct", "http://127.0.0.1:1/old", (EventType.SUCCEEDED,)))
        return batch, f, sub

    batch, f, sub = run(write, target)
    r = redis.Redis.from_url(target, decode_responses=True)
    p = "tandem:asyncq:"
    # the fixed ids the test reads: rename the objects
    r.rename(p + "batch:" + batch.id, p + "batch:old-batch")
    r.rename(p + "batch:" + batch.id + ":jobs", p + "batch:old-batch:jobs")
    r.hset(p + "batch:old-batch", "id", "old-batch")
    (job_id,) = r.lrange(p + "batch:old-batch:jobs", 0, -1)
    r.hset(p + "job:" + job_id, "batch_id", "old-batch")
    r.zrem(p + "batches:acct", batch.id)
    r.zadd(p + "batches:acct", {"old-batch": 1.0})
    r.hset(p + "batch_keys", "acct\0k", "old-batch")
    r.rename(p + "event:" + batch.id + "." + EventType.QUEUED.value,
             p + "event:old-batch." + EventType.QUEUED.value)
    r.rename(p + "file:" + f.id, p + "file:file-old")
    r.hset(p + "file:file-old", "id", "file-old")
    r.zrem(p + "files:acct", f.id)
    r.zadd(p + "files:acct", {"file-old": 1.0})
    for key in (p + "batch:old-batch", p + "file:file-old", p + "sub:" + sub.id,
                p + "event:old-batch." + EventType.QUEUED.value):
        assert r.hdel(key, "tenant") == 1
    r.lset(p + "batch:old-batch:jobs", 0, "old-job")
    r.rename(p + "job:" + job_id, p + "job:old-job")
    r.hset(p + "job:old-job", "id", "old-job")
    r.zrem(p + "ready", job_id)
    r.zadd(p + "ready", {"old-job": 1})
    r.close()


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
        assert (await q.get_batch(batch.id, ANONYMOUS)).total == 2
    run(body, queue_target)


def _drop_tables(target: str) -> None:
    """Empty the PostgreSQL database again, so the next round races on creating the schema."""
    import psycopg
    with psycopg.connect(target, autocommit=True) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'asyncq_%'").fetchall()]
        conn.execute(f"DROP TABLE IF EXISTS {', '.join(names)}")
