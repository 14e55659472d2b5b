"""Redis backend (redis-py's asyncio client): several gateways share one queue on one Redis
server. Every change is one Lua script (redis_scripts.py), atomic on the server and timed by
the server's clock. Jobs are hashes; the ready, delayed and leased sets are sorted sets (a
priority order and lease expiry that Redis Streams' consumer groups do not offer).

Durability is Redis's: run it with appendonly (AOF, `appendfsync everysec` or `always`) for a
queue that survives a Redis restart.
"""

from __future__ import annotations

import secrets
import uuid

import orjson
import redis.asyncio as aioredis

from tandem.asyncq import redis_scripts as lua
from tandem.asyncq.event import (
    Delivery, DeliveryStatus, Event, EventType, Subscription, SubscriptionSpec,
)
from tandem.asyncq.job import (
    ANONYMOUS, JSON, Batch, BatchSpec, Claim, Job, JobStatus, Lease, StoredFile, scoped, unscoped,
)
from tandem.asyncq.queue import KeyTaken

MAX_ABS_PRIORITY = 1000   # keeps the ready set's scores exact (see redis_scripts.py)


def _pairs(flat: list) -> dict[str, str]:
    return dict(zip(flat[0::2], flat[1::2]))


def _opt_float(h: dict, key: str) -> float | None:
    return float(h[key]) if key in h else None


def _opt_json(h: dict, key: str):
    return orjson.loads(h[key]) if key in h else None


def _tenant(h: dict) -> str:
    """A hash's tenant (absent: stored before tenants were, anonymous)."""
    return h.get("tenant", ANONYMOUS)


def _batch(h: dict) -> Batch:
    return Batch(id=h["id"], account=h["account"], model=h["model"],
                 key=unscoped(_tenant(h), h["key"] or None),
                 priority=int(h["priority"]), created_at=float(h["created_at"]),
                 total=int(h["total"]), succeeded=int(h["succeeded"]), failed=int(h["failed"]),
                 cancelled=int(h["cancelled"]), meta=orjson.loads(h["meta"]), tenant=_tenant(h))


def _job(h: dict) -> Job:
    return Job(id=h["id"], batch_id=h["batch_id"], index=int(h["idx"]), account=h["account"],
               model=h["model"], priority=int(h["priority"]), body=orjson.loads(h["body"]),
               external_reference=h.get("external_reference"), status=JobStatus(h["status"]),
               attempts=int(h["attempts"]), max_attempts=int(h["max_attempts"]),
               created_at=float(h["created_at"]), started_at=_opt_float(h, "started_at"),
               finished_at=_opt_float(h, "finished_at"), result=_opt_json(h, "result"),
               error=_opt_json(h, "error"), owner=h.get("owner"),
               lease_expires_at=_opt_float(h, "lease_expires_at"),
               progress=_opt_json(h, "progress"))


def _progress(progress: JSON | None) -> str:
    """A script's progress argument: '' = keep the saved progress."""
    return "" if progress is None else orjson.dumps(progress).decode()


def _subscription(h: dict) -> Subscription:
    return Subscription(id=h["id"], account=h["account"], url=h["url"],
                        event_types=tuple(EventType(t) for t in h["event_types"].split(",") if t),
                        secret=h["secret"], created_at=float(h["created_at"]), tenant=_tenant(h))


def _event(e: dict) -> Event:
    return Event(id=e["id"], type=EventType(e["type"]), batch_id=e["batch_id"],
                 account=e["account"], model=e["model"], payload=orjson.loads(e["payload"]),
                 created_at=float(e["created_at"]), tenant=_tenant(e))


def _delivery(d: dict, e: dict) -> Delivery:
    return Delivery(id=d["id"], event=_event(e), subscription_id=d["subscription_id"], url=d["url"],
                    secret=d["secret"], status=DeliveryStatus(d["status"]),
                    attempts=int(d["attempts"]), next_at=float(d["next_at"]),
                    last_error=d.get("last_error"))


class RedisQueue:
    """A `JobQueue` (tandem/asyncq/queue.py) on Redis; keys under `prefix`."""

    def __init__(self, url: str, prefix: str = "tandem:asyncq:") -> None:
        self._r = aioredis.Redis.from_url(url, decode_responses=True)
        self._p = prefix
        self._scripts = {name: self._r.register_script(getattr(lua, name)) for name in (
            "ENQUEUE", "TAKE", "RENEW", "FINISH", "CANCEL", "TAKE_DELIVERIES", "FINISH_DELIVERY")}

    async def _call(self, name: str, *args) -> object:
        return await self._scripts[name](keys=[self._p], args=[str(a) for a in args])

    # --- jobs -----------------------------------------------------------------------------
    async def enqueue(self, spec: BatchSpec) -> tuple[Batch, bool]:
        if abs(spec.priority) > MAX_ABS_PRIORITY:
            raise ValueError(f"priority must be within +-{MAX_ABS_PRIORITY}, got {spec.priority}")
        jobs = [{"id": uuid.uuid4().hex, "body": orjson.dumps(j.body).decode(),
                 "ext": j.external_reference} for j in spec.jobs]
        key = "" if spec.key is None else scoped(spec.tenant, spec.key)
        flat, created = await self._call(
            "ENQUEUE", uuid.uuid4().hex, spec.account, spec.model, key, spec.priority,
            orjson.dumps(spec.meta).decode(), spec.max_attempts, orjson.dumps(jobs).decode(),
            spec.tenant)
        batch = _batch(_pairs(flat))
        if batch.tenant != spec.tenant:
            raise KeyTaken()
        return batch, bool(created)

    async def take(self, n: int, owner: str, lease_s: float) -> list[Claim]:
        jobs = [_job(_pairs(flat)) for flat in await self._call("TAKE", n, owner, lease_s)]
        return [Claim(j, Lease(j.id, owner, j.attempts, j.lease_expires_at)) for j in jobs]

    async def renew(self, lease: Lease, lease_s: float, progress: JSON | None = None) -> Lease | None:
        expires = await self._call("RENEW", lease.job_id, lease.owner, lease.attempt, lease_s,
                                   _progress(progress))
        return None if expires is None else Lease(lease.job_id, lease.owner, lease.attempt,
                                                  float(expires))

    async def _finish(self, lease: Lease, mode: str, payload: JSON | None, retryable: bool = False,
                      retry_delay_s: float = 0.0, progress: JSON | None = None) -> JobStatus | None:
        status = await self._call("FINISH", lease.job_id, lease.owner, lease.attempt, mode,
                                  orjson.dumps(payload).decode(), int(retryable), retry_delay_s,
                                  _progress(progress))
        return None if status is None else JobStatus(status)

    async def complete(self, lease: Lease, result: JSON) -> bool:
        return await self._finish(lease, "complete", result) is not None

    async def fail(self, lease: Lease, error: JSON, retryable: bool,
                   retry_delay_s: float = 0.0) -> JobStatus | None:
        return await self._finish(lease, "fail", error, retryable, retry_delay_s)

    async def requeue(self, lease: Lease, progress: JSON | None = None, delay_s: float = 0.0) -> bool:
        return await self._finish(lease, "requeue", None, retry_delay_s=max(0.0, delay_s),
                                  progress=progress) is not None

    async def cancel(self, batch_id: str, tenant: str) -> int:
        return int(await self._call("CANCEL", batch_id, tenant))

    async def get(self, job_id: str) -> Job | None:
        h = await self._r.hgetall(self._p + "job:" + job_id)
        return _job(h) if h else None

    async def get_batch(self, batch_id: str, tenant: str) -> Batch | None:
        h = await self._r.hgetall(self._p + "batch:" + batch_id)
        return _batch(h) if h and _tenant(h) == tenant else None

    async def list_batch(self, batch_id: str, tenant: str) -> list[Job]:
        found, owner = await self._r.hmget(self._p + "batch:" + batch_id, ["id", "tenant"])
        if found is None or (owner or ANONYMOUS) != tenant:
            return []   # absent, or another tenant's
        ids = await self._r.lrange(self._p + "batch:" + batch_id + ":jobs", 0, -1)
        async with self._r.pipeline(transaction=True) as pipe:
            for job_id in ids:
                pipe.hgetall(self._p + "job:" + job_id)
            return [_job(h) for h in await pipe.execute()]

    async def list_batches(self, account: str, tenant: str) -> list[Batch]:
        ids = await self._r.zrevrange(self._p + "batches:" + scoped(tenant, account), 0, -1)
        batches = [await self.get_batch(i, tenant) for i in ids]
        return [b for b in batches if b is not None and b.account == account]

    # --- events -----------------------------------------------------------------------------
    async def subscribe(self, spec: SubscriptionSpec) -> Subscription:
        seconds, micros = await self._r.time()
        sub = Subscription(id=uuid.uuid4().hex, account=spec.account, url=spec.url,
                           event_types=tuple(spec.event_types),
                           secret=spec.secret or secrets.token_hex(32),
                           created_at=seconds + micros / 1e6, tenant=spec.tenant)
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hset(self._p + "sub:" + sub.id, mapping={
                "id": sub.id, "account": sub.account, "url": sub.url, "secret": sub.secret,
                "event_types": ",".join(t.value for t in sub.event_types),
                "created_at": repr(sub.created_at), "tenant": sub.tenant})
            pipe.sadd(self._p + "subs:" + scoped(sub.tenant, sub.account), sub.id)
            await pipe.execute()
        return sub

    async def subscriptions(self, account: str, tenant: str) -> list[Subscription]:
        ids = await self._r.smembers(self._p + "subs:" + scoped(tenant, account))
        subs = [_subscription(h) for h in [await self._r.hgetall(self._p + "sub:" + i) for i in ids] if h]
        return sorted((s for s in subs if s.tenant == tenant and s.account == account),
                      key=lambda s: (s.created_at, s.id))

    async def unsubscribe(self, subscription_id: str, tenant: str) -> bool:
        h = await self._r.hgetall(self._p + "sub:" + subscription_id)
        if not h or _tenant(h) != tenant:
            return False
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.srem(self._p + "subs:" + scoped(tenant, h["account"]), subscription_id)
            pipe.delete(self._p + "sub:" + subscription_id)
            await pipe.execute()
        return True

    async def take_deliveries(self, n: int, lease_s: float) -> list[Delivery]:
        rows = await self._call("TAKE_DELIVERIES", n, lease_s)
        return [_delivery(_pairs(d), _pairs(e)) for d, e in rows]

    async def finish_delivery(self, delivery: Delivery, ok: bool, error: str | None,
                              retry_in_s: float | None) -> bool:
        status = (DeliveryStatus.DELIVERED if ok else
                  DeliveryStatus.DEAD if retry_in_s is None else DeliveryStatus.PENDING)
        return bool(await self._call("FINISH_DELIVERY", delivery.id, delivery.attempts,
                                     status.value, error or "", retry_in_s or 0))

    async def batch_events(self, batch_id: str, tenant: str) -> list[Event]:
        events = []
        for t in EventType:   # event ids are <batch id>.<type> (redis_scripts.record_event)
            h = await self._r.hgetall(self._p + "event:" + batch_id + "." + t.value)
            if h and _tenant(h) == tenant:
                events.append(_event(h))
        return sorted(events, key=lambda e: (e.created_at, e.id))

    async def dead_letters(self, account: str, tenant: str) -> list[Delivery]:
        out = []
        for delivery_id in await self._r.lrange(self._p + "dead:" + scoped(tenant, account), 0, -1):
            d = await self._r.hgetall(self._p + "delivery:" + delivery_id)
            if _tenant(d) != tenant or d["account"] != account:
                continue
            e = await self._r.hgetall(self._p + "event:" + d["event_id"])
            out.append(_delivery(d, e))
        return out

    # --- files ------------------------------------------------------------------------------
    async def put_file(self, account: str, purpose: str, filename: str, content: str,
                       tenant: str) -> StoredFile:
        seconds, micros = await self._r.time()
        f = StoredFile(id="file-" + uuid.uuid4().hex, account=account, purpose=purpose,
                       filename=filename, bytes=len(content.encode()),
                       created_at=seconds + micros / 1e6, tenant=tenant)
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hset(self._p + "file:" + f.id, mapping={
                "id": f.id, "account": account, "purpose": purpose, "filename": filename,
                "bytes": f.bytes, "created_at": repr(f.created_at), "content": content,
                "tenant": tenant})
            pipe.zadd(self._p + "files:" + scoped(tenant, account), {f.id: f.created_at})
            await pipe.execute()
        return f

    async def get_file(self, file_id: str, tenant: str, with_content: bool = False) -> StoredFile | None:
        h = await self._r.hgetall(self._p + "file:" + file_id)
        if not h or _tenant(h) != tenant:
            return None
        return StoredFile(id=h["id"], account=h["account"], purpose=h["purpose"],
                          filename=h["filename"], bytes=int(h["bytes"]),
                          created_at=float(h["created_at"]),
                          content=h["content"] if with_content else None, tenant=tenant)

    async def list_files(self, account: str, tenant: str) -> list[StoredFile]:
        ids = await self._r.zrange(self._p + "files:" + scoped(tenant, account), 0, -1)
        files = [await self.get_file(i, tenant) for i in ids]
        return [f for f in files if f is not None and f.account == account]

    async def delete_file(self, file_id: str, tenant: str) -> bool:
        h = await self._r.hmget(self._p + "file:" + file_id, ["account", "tenant"])
        account = h[0]
        if account is None or (h[1] or ANONYMOUS) != tenant:
            return False
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.zrem(self._p + "files:" + scoped(tenant, account), file_id)
            pipe.delete(self._p + "file:" + file_id)
            await pipe.execute()
        return True

    async def close(self) -> None:
        await self._r.aclose()
