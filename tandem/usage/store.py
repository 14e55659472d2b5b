"""What the rate limiter and the ledger need from the shared database, and the values they
exchange. Backends: SQL (SQLite, PostgreSQL: sql_store.py), Redis (redis_store.py); the same
tests (tests/usage/test_store.py) run on each.

Invariants every backend keeps:
- `consume` reads the key's previous and current window and adds the cost to the current one
  only if `window.fits` says so, in one atomic step on the store's clock (the server's for Redis
  and PostgreSQL, this host's for SQLite), so that any number of gateways admit exactly what one
  would.
- `settle` applies a reconciliation to the window the admission was counted in (a window gone
  by changes nothing that is still read) and records a ledger entry at most once per key: the
  first `settle` with a key inserts it, every later one changes nothing and returns False. Both
  in one atomic step.
- `ledger` sums the entries by account, model and day (inclusive range of "YYYY-MM-DD" UTC days).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tandem.usage.limits import Limit
from tandem.usage.pricing import TokenUsage
from tandem.usage.window import Counts, WindowState

# Redis keeps the keys of recorded entries this long (SQL keeps them with the entries): a
# request recorded again later (a queued job re-run after a lease expired) is far sooner.
SEEN_TTL_S = 8 * 24 * 3600


@dataclass(frozen=True)
class Reconcile:
    """Add `delta` (may be negative) to window `index` of `key`."""

    key: str
    index: int
    delta: Counts


@dataclass(frozen=True)
class UsageEntry:
    """One completed request (or queued job) in the ledger; `key` makes its recording
    idempotent: the engine request id for an interactive request, the job id for a queued one."""

    key: str
    account: str
    model: str
    day: str          # YYYY-MM-DD, UTC
    kind: str         # interactive | batch
    usage: TokenUsage


@dataclass(frozen=True)
class LedgerRow:
    account: str
    model: str
    day: str
    requests: int
    usage: TokenUsage


class UsageStore(Protocol):
    async def consume(self, key: str, cost: Counts, limit: Limit, window_s: float,
                      now: float | None = None) -> WindowState:
        """Admit `cost` under `limit` if it fits (see the module's invariants). `now` replaces
        the store's clock (tests)."""

    async def settle(self, reconcile: Reconcile | None, entry: UsageEntry | None) -> bool:
        """-> whether `entry` was recorded now (False: its key was recorded before, or None)."""

    async def ledger(self, account: str | None, since: str, until: str) -> list[LedgerRow]:
        """Rows of `account` (None: every account), ordered by day, account, model."""

    async def close(self) -> None: ...
