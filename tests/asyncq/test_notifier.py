"""Webhook delivery against a real local HTTP receiver: down at first, then up (retries with
backoff, every event delivered once, signed); always failing (dead letter)."""

from __future__ import annotations

import asyncio
import time

import orjson

from tandem.asyncq.event import EventType, SubscriptionSpec
from tandem.asyncq.job import ANONYMOUS, BatchSpec, JobSpec
from tandem.asyncq.notifier import Notifier, NotifierConfig, backoff_s
from tandem.asyncq.open_queue import open_queue
from tandem.asyncq.signature import HEADER, verify
from tests.asyncq.receiver import Receiver
from tests.asyncq.servers import free_port


async def _until(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def _finish_batch(q, n: int) -> str:
    batch, _ = await q.enqueue(BatchSpec(account="acct", model="@cf/demo/m",
                                         jobs=tuple(JobSpec({"i": i}) for i in range(n))))
    for claim in await q.take(n, "o", 30):
        assert await q.complete(claim.lease, {"ok": 1})
    return batch.id


def test_receiver_down_then_up_gets_every_event_once(queue_target):
    async def main():
        q = open_queue(queue_target)
        receiver = Receiver(free_port())
        sub = await q.subscribe(SubscriptionSpec("acct", f"http://127.0.0.1:{receiver.port}/hook"))
        cfg = NotifierConfig(max_attempts=30, backoff_base_s=0.05, backoff_max_s=0.2,
                             timeout_s=2.0, lease_s=5.0, idle_poll_s=0.05)
        notifier = Notifier(q, cfg)
        notifier.start()
        batch_id = await _finish_batch(q, 2)
        await asyncio.sleep(0.6)          # several attempts hit a closed port
        receiver.status = 503
        receiver.start()                  # up, but failing for a while
        await _until(lambda: len(receiver.posts) >= 2)
        receiver.status = 200
        await _until(lambda: _delivered(receiver) == 2)
        await asyncio.sleep(0.3)          # nothing more arrives once delivered
        await notifier.stop()
        receiver.stop()
        ok = [p for p in receiver.posts if p.status == 200]
        assert len(ok) == 2 and len({p.headers["x-tandem-delivery"] for p in ok}) == 2
        events = [orjson.loads(p.body) for p in ok]
        assert sorted(e["type"] for e in events) == [EventType.QUEUED.value, EventType.SUCCEEDED.value]
        for post, event in zip(ok, events):
            assert verify(sub.secret, post.headers[HEADER], post.body, now=time.time())
            assert event["payload"]["requestId"] == batch_id
            assert event["source"] == {"type": "workersAi.model", "modelName": "@cf/demo/m"}
            assert event["metadata"]["eventSubscriptionId"] == sub.id
            assert event["metadata"]["accountId"] == "acct"
            assert int(post.headers["x-tandem-delivery-attempt"]) > 1   # it was retried
        assert await q.dead_letters("acct", ANONYMOUS) == []
        await q.close()
    asyncio.run(main())


def _delivered(receiver: Receiver) -> int:
    return sum(1 for p in receiver.posts if p.status == 200)


def test_dead_letter_after_the_last_attempt(tmp_path):
    async def main():
        q = open_queue(str(tmp_path / "q.db"))
        receiver = Receiver(free_port(), status=500)
        receiver.start()
        await q.subscribe(SubscriptionSpec("acct", f"http://127.0.0.1:{receiver.port}/hook",
                                           (EventType.QUEUED,)))
        cfg = NotifierConfig(max_attempts=3, backoff_base_s=0.05, backoff_max_s=0.1,
                             timeout_s=2.0, lease_s=5.0, idle_poll_s=0.05)
        notifier = Notifier(q, cfg)
        notifier.start()
        batch_id = await _finish_batch(q, 1)
        await _until(lambda: len(receiver.posts) == 3)
        await asyncio.sleep(0.4)
        await notifier.stop()
        receiver.stop()
        assert [p.headers["x-tandem-delivery-attempt"] for p in receiver.posts] == ["1", "2", "3"]
        (dead,) = await q.dead_letters("acct", ANONYMOUS)
        assert dead.event.batch_id == batch_id and dead.last_error == "HTTP 500"
        assert dead.attempts == 3
        await q.close()
    asyncio.run(main())


def test_backoff_doubles_up_to_the_cap():
    cfg = NotifierConfig(backoff_base_s=1.0, backoff_max_s=5.0)
    assert [backoff_s(cfg, k) for k in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
