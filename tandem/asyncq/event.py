"""Batch events, subscriptions to them, and their deliveries, in Cloudflare's event shape.

A batch records `cf.workersAi.model.batch.queued` when it is enqueued and exactly one of
`.succeeded` / `.failed` when its last job becomes terminal (failed when any job failed or was
cancelled). The store writes the event and one delivery per matching subscription in the same
transaction as the job change that caused it (an outbox), so no event is lost to a crash; the
notifier then posts each delivery until the receiver accepts it or its attempts are spent. A
subscription matches the events of its own tenant's batches in its account, never another
tenant's (tandem/asyncq/job.py: ownership).
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

from tandem.asyncq.job import ANONYMOUS, JSON

EVENT_SCHEMA_VERSION = 1
SOURCE_TYPE = "workersAi.model"


class EventType(str, enum.Enum):
    QUEUED = "cf.workersAi.model.batch.queued"
    SUCCEEDED = "cf.workersAi.model.batch.succeeded"
    FAILED = "cf.workersAi.model.batch.failed"


class DeliveryStatus(str, enum.Enum):
    PENDING = "pending"      # due at next_at (a delivery being attempted has next_at = its lease end)
    DELIVERED = "delivered"  # the receiver answered 2xx
    DEAD = "dead"            # the dead-letter record: attempts spent, last_error says why


@dataclass(frozen=True)
class SubscriptionSpec:
    account: str
    url: str
    event_types: tuple[EventType, ...] = tuple(EventType)
    secret: str | None = None   # None: the store generates one (returned once by subscribe)
    tenant: str = ANONYMOUS     # it receives only this tenant's batches' events


@dataclass(frozen=True)
class Subscription:
    id: str
    account: str
    url: str
    event_types: tuple[EventType, ...]
    secret: str
    created_at: float
    tenant: str = ANONYMOUS


@dataclass(frozen=True)
class Event:
    id: str
    type: EventType
    batch_id: str
    account: str
    model: str
    payload: JSON          # {"requestId": batch id, ...counts for terminal events}
    created_at: float
    tenant: str = ANONYMOUS  # the batch's


@dataclass(frozen=True)
class Delivery:
    id: str
    event: Event
    subscription_id: str
    url: str
    secret: str
    status: DeliveryStatus
    attempts: int          # posts started so far (the current one included once taken)
    next_at: float
    last_error: str | None


def event_payload(event_type: EventType, batch_id: str, counts: dict[str, int] | None) -> JSON:
    """The payload: Cloudflare's `requestId`, plus the job counts once the batch is done."""
    payload: JSON = {"requestId": batch_id}
    if event_type is not EventType.QUEUED and counts is not None:
        payload.update(counts)
    return payload


def render(event: Event, subscription_id: str | None) -> JSON:
    """The body posted to a subscriber: Cloudflare's `type`, `source`, `payload`, `metadata`.
    Stable across retries (the timestamp is the event's, not the attempt's)."""
    stamp = dt.datetime.fromtimestamp(event.created_at, dt.timezone.utc)
    return {
        "type": event.type.value,
        "source": {"type": SOURCE_TYPE, "modelName": event.model},
        "payload": dict(event.payload),
        "metadata": {
            "accountId": event.account,
            "eventSubscriptionId": subscription_id,
            "eventSchemaVersion": EVENT_SCHEMA_VERSION,
            "eventTimestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        },
    }


def batch_end_event(succeeded: int, failed: int, cancelled: int) -> EventType:
    return EventType.SUCCEEDED if failed == 0 and cancelled == 0 else EventType.FAILED
