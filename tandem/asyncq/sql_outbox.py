"""The SQL outbox: batch events, subscriptions and deliveries, as functions of a transaction
(`Tx`), so that an event is recorded in the same transaction as the job change behind it."""

from __future__ import annotations

import secrets
import uuid

from tandem.asyncq.event import (
    Delivery, DeliveryStatus, Event, EventType, Subscription, SubscriptionSpec, event_payload,
)
from tandem.asyncq.sql_db import Tx
from tandem.asyncq.sql_schema import (
    DELIVERY_COLUMNS, EVENT_COLUMNS, SUBSCRIPTION_COLUMNS, delivery_from_row, dumps,
    event_from_row, subscription_from_row,
)


def record_event(tx: Tx, event_type: EventType, batch_id: str, account: str, model: str,
                 tenant: str, counts: dict[str, int] | None = None) -> None:
    """Insert the event (at most one per batch and type) and one PENDING delivery, due now, per
    subscription of the batch's tenant and account that wants this type."""
    event_id = uuid.uuid4().hex
    inserted = tx.rows(
        "INSERT INTO asyncq_events (id, type, batch_id, account, model, payload, created_at, tenant) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (batch_id, type) DO NOTHING RETURNING id",
        (event_id, event_type.value, batch_id, account, model,
         dumps(event_payload(event_type, batch_id, counts)), tx.now, tenant))
    if not inserted:
        return
    subs = tx.rows(f"SELECT {SUBSCRIPTION_COLUMNS} FROM asyncq_subscriptions "
                   "WHERE account = ? AND tenant = ?", (account, tenant))
    for sub in map(subscription_from_row, subs):
        if event_type in sub.event_types:
            tx.rows("INSERT INTO asyncq_deliveries (id, event_id, subscription_id, account, url, "
                    "secret, status, attempts, next_at, last_error, tenant) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, NULL, ?)",
                    (uuid.uuid4().hex, event_id, sub.id, account, sub.url, sub.secret, tx.now,
                     tenant))


def subscribe(tx: Tx, spec: SubscriptionSpec) -> Subscription:
    sub = Subscription(id=uuid.uuid4().hex, account=spec.account, url=spec.url,
                       event_types=tuple(spec.event_types),
                       secret=spec.secret or secrets.token_hex(32), created_at=tx.now,
                       tenant=spec.tenant)
    tx.rows(f"INSERT INTO asyncq_subscriptions ({SUBSCRIPTION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (sub.id, sub.account, sub.url, ",".join(t.value for t in sub.event_types), sub.secret,
             sub.created_at, sub.tenant))
    return sub


def subscriptions(tx: Tx, account: str, tenant: str) -> list[Subscription]:
    rows = tx.rows(f"SELECT {SUBSCRIPTION_COLUMNS} FROM asyncq_subscriptions "
                   "WHERE account = ? AND tenant = ? ORDER BY created_at, id", (account, tenant))
    return [subscription_from_row(r) for r in rows]


def unsubscribe(tx: Tx, subscription_id: str, tenant: str) -> bool:
    """Deliveries already recorded for it still go out (they were owed when it existed)."""
    return bool(tx.rows("DELETE FROM asyncq_subscriptions WHERE id = ? AND tenant = ? RETURNING id",
                        (subscription_id, tenant)))


_SELECT_DELIVERIES = (f"SELECT {DELIVERY_COLUMNS} FROM asyncq_deliveries d "
                      "JOIN asyncq_events e ON e.id = d.event_id ")


def take_deliveries(tx: Tx, n: int, lease_s: float) -> list[Delivery]:
    due = tx.rows("SELECT id FROM asyncq_deliveries WHERE status = 'pending' AND next_at <= ? "
                  "ORDER BY next_at, id LIMIT ? {SKIP_LOCKED}", (tx.now, n))
    taken = []
    for (delivery_id,) in due:
        tx.rows("UPDATE asyncq_deliveries SET attempts = attempts + 1, next_at = ? WHERE id = ?",
                (tx.now + lease_s, delivery_id))
        taken += tx.rows(_SELECT_DELIVERIES + "WHERE d.id = ?", (delivery_id,))
    return [delivery_from_row(r) for r in taken]


def finish_delivery(tx: Tx, delivery: Delivery, ok: bool, error: str | None,
                    retry_in_s: float | None) -> bool:
    if ok:
        status, next_at = DeliveryStatus.DELIVERED, tx.now
    elif retry_in_s is None:
        status, next_at = DeliveryStatus.DEAD, tx.now
    else:
        status, next_at = DeliveryStatus.PENDING, tx.now + retry_in_s
    # attempts fences: a notifier whose lease ran out and was overtaken changes nothing
    return bool(tx.rows(
        "UPDATE asyncq_deliveries SET status = ?, next_at = ?, last_error = ? "
        "WHERE id = ? AND attempts = ? AND status = 'pending' RETURNING id",
        (status.value, next_at, error, delivery.id, delivery.attempts)))


def dead_letters(tx: Tx, account: str, tenant: str) -> list[Delivery]:
    rows = tx.rows(_SELECT_DELIVERIES + "WHERE d.account = ? AND d.tenant = ? AND d.status = 'dead' "
                   "ORDER BY e.created_at, d.id", (account, tenant))
    return [delivery_from_row(r) for r in rows]


def batch_events(tx: Tx, batch_id: str, tenant: str) -> list[Event]:
    rows = tx.rows(f"SELECT {EVENT_COLUMNS} FROM asyncq_events e WHERE e.batch_id = ? AND e.tenant = ? "
                   "ORDER BY e.created_at, e.id", (batch_id, tenant))
    return [event_from_row(r) for r in rows]
