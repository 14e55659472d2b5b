"""The usage store on each backend (SQLite, Redis, PostgreSQL): the same decisions with exact
numbers on a given clock, reconciliation, the idempotent ledger, and two stores on one database
(two gateways) admitting exactly the limit under a concurrent burst."""

from __future__ import annotations

import asyncio

import pytest

from tandem.usage.limits import Limit
from tandem.usage.open_store import open_store
from tandem.usage.pricing import TokenUsage
from tandem.usage.store import LedgerRow, Reconcile, UsageEntry
from tandem.usage.window import Counts

W = 60.0


def run(coro):
    return asyncio.run(coro)


def entry(key: str, account: str = "key-0", day: str = "2026-03-01", model: str = "m",
          usage: TokenUsage = TokenUsage(10, 6, 20)) -> UsageEntry:
    return UsageEntry(key=key, account=account, model=model, day=day, kind="interactive", usage=usage)


def test_requests_are_admitted_up_to_the_limit_on_the_sliding_window(queue_target):
    async def go():
        s = open_store(queue_target)
        try:
            lim, one = Limit(requests=3), Counts(1, 0, 0)
            got = [await s.consume("k", one, lim, W, now=600.0) for _ in range(4)]
            assert [g.admitted for g in got] == [True, True, True, False]
            assert [g.cur.requests for g in got] == [1, 2, 3, 3]
            assert (got[0].index, got[0].elapsed) == (10, 0.0)
            late = await s.consume("k", one, lim, W, now=630.0)   # same window: 3 + 1 > 3
            assert not late.admitted and late.cur == Counts(3, 0, 0)
            # next window, 15 s in: 3 * 45/60 + 1 = 3.25 > 3; 21 s in: 3 * 39/60 + 1 = 2.95
            assert not (await s.consume("k", one, lim, W, now=675.0)).admitted
            fresh = await s.consume("k", one, lim, W, now=681.0)
            assert fresh.admitted and fresh.index == 11
            assert (fresh.prev, fresh.cur) == (Counts(3, 0, 0), Counts(1, 0, 0))
            other = await s.consume("k2", one, lim, W, now=681.0)   # keys are apart
            assert other.admitted and other.prev == Counts() and other.cur == Counts(1, 0, 0)
            # windows before the previous one are forgotten
            gone = await s.consume("k", one, lim, W, now=800.0)
            assert gone.admitted and gone.prev == Counts() and gone.cur == Counts(1, 0, 0)
        finally:
            await s.close()
    run(go())


def test_token_counts_are_checked_with_the_cost_and_reconciled(queue_target):
    async def go():
        s = open_store(queue_target)
        try:
            lim = Limit(input_tokens=100, output_tokens=100)
            a = await s.consume("t", Counts(1, 60, 50), lim, W, now=1200.0)
            assert a.admitted and a.cur == Counts(1, 60, 50)
            assert not (await s.consume("t", Counts(1, 60, 10), lim, W, now=1201.0)).admitted
            # the first request produced 20 of its 50 reserved output tokens
            assert not await s.settle(Reconcile("t", a.index, Counts(0, 0, -30)), None)
            b = await s.consume("t", Counts(1, 40, 80), lim, W, now=1202.0)
            assert b.admitted and b.cur == Counts(2, 100, 100)     # 20 + 80 = 100 fits exactly
            # a reconciliation of a window gone by changes nothing that is read
            await s.settle(Reconcile("t", a.index - 5, Counts(0, 0, -1000)), None)
            assert (await s.consume("t", Counts(), lim, W, now=1203.0)).cur == Counts(2, 100, 100)
        finally:
            await s.close()
    run(go())


def test_an_entry_is_recorded_once_and_summed_by_account_model_and_day(queue_target):
    async def go():
        s = open_store(queue_target)
        try:
            assert await s.settle(None, entry("r1"))
            assert not await s.settle(None, entry("r1", usage=TokenUsage(999, 0, 0)))   # a retry
            assert await s.settle(Reconcile("nowhere", 1, Counts(0, 0, 1)), entry("r2"))
            assert await s.settle(None, entry("r3", day="2026-03-02"))
            assert await s.settle(None, entry("r4", account="key-1", usage=TokenUsage(1, 2, 3)))
            assert await s.settle(None, entry("r5", model="n", usage=TokenUsage(0, 0, 7)))
            assert await s.ledger("key-0", "2026-03-01", "2026-03-02") == [
                LedgerRow("key-0", "m", "2026-03-01", 2, TokenUsage(20, 12, 40)),
                LedgerRow("key-0", "n", "2026-03-01", 1, TokenUsage(0, 0, 7)),
                LedgerRow("key-0", "m", "2026-03-02", 1, TokenUsage(10, 6, 20))]
            assert await s.ledger("key-0", "2026-03-02", "2026-03-05") == [
                LedgerRow("key-0", "m", "2026-03-02", 1, TokenUsage(10, 6, 20))]
            every = await s.ledger(None, "2026-03-01", "2026-03-01")
            assert [(r.account, r.model, r.requests) for r in every] == [
                ("key-0", "m", 2), ("key-0", "n", 1), ("key-1", "m", 1)]
            assert await s.ledger("nobody", "2026-03-01", "2026-03-02") == []
        finally:
            await s.close()
    run(go())


@pytest.mark.timeout(120)
def test_two_stores_on_one_database_admit_exactly_the_limit_under_a_burst(queue_target):
    """Two gateways' stores, 60 concurrent admissions of one key under a limit of 25 requests and
    1000 input tokens (40 each): exactly 25 pass, whatever the interleaving."""
    async def go():
        a, b = open_store(queue_target), open_store(queue_target)
        try:
            lim = Limit(requests=25, input_tokens=1000)
            burst = [(a if i % 2 else b).consume("burst", Counts(1, 40, 0), lim, W, now=3000.0)
                     for i in range(60)]
            got = await asyncio.gather(*burst)
            assert sum(g.admitted for g in got) == 25
            final = await a.consume("burst", Counts(), lim, W, now=3000.0)
            assert final.cur == Counts(25, 1000, 0)
        finally:
            await a.close()
            await b.close()
    run(go())



def test_the_usage_store_opens_a_sqlite_file_another_connection_is_writing(tmp_path):
    """A gateway opens the queue, the accounts and the usage store on one file at once. Switching
    it to WAL while another connection holds its write lock fails at once with 'database is
    locked' (SQLite skips the busy handler there): the open retries within the busy timeout
    rather than failing the gateway's start."""
    import sqlite3
    import threading

    path = str(tmp_path / "queue.db")
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    release = threading.Timer(0.3, lambda: writer.execute("COMMIT"))
    release.start()
    try:
        store = open_store(path)
        run(store.close())
    finally:
        release.join()
        writer.close()
