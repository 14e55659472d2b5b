"""Admission and settlement of metered work, over a `UsageStore`.

A request is metered in two steps, each one store call:
1. `admit` (before any engine work; its input tokens are known, they were tokenized): with a
   limit for (kind, account, model) it consumes 1 request, its input tokens and its reserved
   output tokens (RateLimits.reservation per engine request) from the sliding window
   (window.py), atomically in the store; refused, it raises `RateLimited` (429) with Retry-After
   and the x-ratelimit-* headers, and nothing is counted. Without a limit it costs nothing.
2. `settle` (once the request's usage is final): the window is corrected to what was actually
   used (the reserved output replaced by the output produced; everything given back when
   nothing was produced), and the ledger entry is recorded under its key at most once, in the
   same store call.

A store that fails is logged and counted (tandem:usage_store_errors_total) and the request goes
on: admitted without a limit, or not recorded (availability over the ledger's completeness).

Headers (OpenAI's names; durations as OpenAI writes them, "1s", "6m0s", "20ms"):
x-ratelimit-limit-requests, -remaining-requests, -reset-requests; the same for -input-tokens and
-output-tokens; and -tokens, the token count (input or output) with the smallest share left,
for clients that read OpenAI's single token limit. "reset" is the time until that count's
estimate is back to zero (window.reset_s); on a 429, Retry-After (whole seconds) and
retry-after-ms are the time until the refused request would fit (window.wait_s).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from tandem.errors import RateLimited
from tandem.usage.limits import Limit, RateLimits
from tandem.usage.metrics import UsageMetrics
from tandem.usage.pricing import PriceTable, TokenUsage
from tandem.usage.store import LedgerRow, Reconcile, UsageEntry, UsageStore
from tandem.usage.window import (
    WINDOW_S, Counts, WindowState, exceeded, remaining, reset_s, wait_s,
)

log = logging.getLogger(__name__)

_HEADER_NAMES = {"requests": "requests", "input_tokens": "input-tokens",
                 "output_tokens": "output-tokens"}
_WORDS = {"requests": "requests", "input_tokens": "input tokens", "output_tokens": "output tokens"}


def duration(seconds: float) -> str:
    """OpenAI's form of a reset time: "20ms", "1.5s", "6m0s"."""
    if seconds < 1.0:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60.0:
        return f"{math.ceil(seconds * 1000) / 1000:g}s"
    whole = math.ceil(seconds)
    return f"{whole // 60}m{whole % 60}s"


def limit_key(kind: str, account: str, model: str) -> str:
    return f"{kind}\x1f{account}\x1f{model}"


def utc_day(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.timezone.utc).date().isoformat()


@dataclass(frozen=True)
class Admission:
    """What an admission counted (settle corrects it); `key` None: nothing was counted."""

    key: str | None = None
    index: int = 0
    cost: Counts = Counts()
    headers: dict[str, str] | None = None


def rate_headers(limit: Limit, state: WindowState) -> dict[str, str]:
    """The x-ratelimit-* headers of a key's window as `state` shows it."""
    headers: dict[str, str] = {}
    token_share: list[tuple[float, str]] = []
    for dim, name in _HEADER_NAMES.items():
        lim = getattr(limit, dim)
        if lim is None:
            continue
        left = remaining(lim, state, dim)
        headers[f"x-ratelimit-limit-{name}"] = str(lim)
        headers[f"x-ratelimit-remaining-{name}"] = str(left)
        headers[f"x-ratelimit-reset-{name}"] = duration(reset_s(state, dim))
        if dim != "requests":
            token_share.append((left / lim, name))
    if token_share:
        _, name = min(token_share)
        for part in ("limit", "remaining", "reset"):
            headers[f"x-ratelimit-{part}-tokens"] = headers[f"x-ratelimit-{part}-{name}"]
    return headers


class Meter:
    def __init__(self, store: UsageStore, limits: RateLimits | None, prices: PriceTable | None,
                 metrics: UsageMetrics | None = None, ledger: bool = True,
                 clock: Callable[[], float] | None = None) -> None:
        self.store = store
        self.limits = limits
        self.prices = prices
        self.metrics = metrics
        self.ledger_on = ledger
        self._clock = clock
        self.window_s = WINDOW_S

    # --- 1. admission -----------------------------------------------------------------------
    async def admit(self, account: str, model: str, kind: str, input_tokens: int,
                    max_tokens: list[int]) -> Admission:
        """Count a request of `input_tokens` with one engine request per `max_tokens` entry.
        Raises RateLimited when it does not fit."""
        limit = self.limits.limit_for(account, model, kind) if self.limits is not None else None
        if limit is None:
            return Admission()
        reserve = sum(self.limits.reservation(m, limit) for m in max_tokens)
        if limit.output_tokens is not None:   # n choices together never too large for it alone
            reserve = min(reserve, limit.output_tokens)
        cost = Counts(1, input_tokens, reserve)
        key = limit_key(kind, account, model)
        try:
            state = await self.store.consume(key, cost, limit, self.window_s)
        except Exception:
            log.exception("usage store: admission failed; the request goes on without a limit")
            if self.metrics:
                self.metrics.store_errors.labels("admit").inc()
            return Admission()
        headers = rate_headers(limit, state)
        if state.admitted:
            return Admission(key, state.index, cost, headers)
        if self.metrics:
            self.metrics.limited.labels(account, model, kind).inc()
        raise self._refusal(account, model, limit, state, cost, headers)

    def _refusal(self, account: str, model: str, limit: Limit, state: WindowState, cost: Counts,
                 headers: dict[str, str]) -> RateLimited:
        over = exceeded(limit, state, cost)
        waits = [wait_s(getattr(limit, d), state, d, cost.get(d)) for d in over]
        kind = "requests" if "requests" in over else "tokens"
        dim = over[0]
        lim = getattr(limit, dim)
        who = f"account {account!r}" if account else "the anonymous account"
        if any(w is None for w in waits):
            too_big = next(d for d, w in zip(over, waits) if w is None)
            message = (f"Request too large for {model} for {who} on {_WORDS[too_big]} per minute: "
                       f"limit {getattr(limit, too_big)}, requested {cost.get(too_big)}. Reduce "
                       "the prompt or max_tokens.")
            wait = self.window_s
        else:
            wait = max(waits)
            used = lim - remaining(lim, state, dim)
            message = (f"Rate limit reached for {model} for {who} on {_WORDS[dim]} per minute: "
                       f"limit {lim}, used {used}, requested {cost.get(dim)}. Please try again "
                       f"in {duration(wait)}.")
        headers = {**headers, "retry-after": str(max(1, math.ceil(wait))),
                   "retry-after-ms": str(max(1, math.ceil(wait * 1000)))}
        return RateLimited(message, kind, headers, wait)

    # --- 2. settlement ----------------------------------------------------------------------
    def entry(self, key: str, account: str, model: str, kind: str, usage: TokenUsage) -> UsageEntry:
        now = self._clock() if self._clock is not None else time.time()
        return UsageEntry(key=key, account=account, model=model, day=utc_day(now), kind=kind,
                          usage=usage)

    async def settle(self, admission: Admission, used: Counts | None,
                     entry: UsageEntry | None) -> bool:
        """Correct the admission to `used` (None: as admitted) and record `entry` (None:
        nothing to record) -> whether the entry was recorded now."""
        reconcile = None
        if admission.key is not None and used is not None and used != admission.cost:
            reconcile = Reconcile(admission.key, admission.index, used - admission.cost)
        if not self.ledger_on:
            entry = None
        if reconcile is None and entry is None:
            return False
        try:
            new = await self.store.settle(reconcile, entry)
        except Exception:
            log.exception("usage store: settling %s failed; not recorded",
                          entry.key if entry else admission.key)
            if self.metrics:
                self.metrics.store_errors.labels("settle").inc()
            return False
        if new and entry is not None and self.metrics:
            self.metrics.recorded(entry.account, entry.model, entry.usage,
                                  self.cost(entry.model, entry.usage))
        return new

    # --- the ledger -------------------------------------------------------------------------
    def cost(self, model: str, usage: TokenUsage) -> float | None:
        return self.prices.cost(model, usage) if self.prices is not None else None

    async def ledger(self, account: str | None, since: str, until: str) -> list[LedgerRow]:
        return await self.store.ledger(account, since, until)


@dataclass(frozen=True)
class UsageConfig:
    """Metering settings of an app with a queue database (the CLI builds it: --rate-limits,
    --rate-limit, --pricing, --no-usage-ledger). An app without a queue meters nothing."""

    limits: RateLimits | None = None   # None: no rate limit
    prices: PriceTable | None = None   # None: costs read null
    ledger: bool = True                # record every completed request

    @property
    def enabled(self) -> bool:
        return self.ledger or self.limits is not None
