"""Estimated token load per worker, tracked through each request's life and corrected by reports.

Per (request, worker) the gateway records:
- on dispatch: `pending` = uncached prompt tokens the worker must still compute (prefill load);
- on the first token back (prefill done): `pending` -> 0, `context` = prompt + outputs so far;
  a decode worker that starts from a KV handle is dispatched directly with its context;
- on every further token: `context` += n (decode load);
- on finish/abort/failure: the entry is dropped.

Correction: a worker's /internal/stats report (`waiting_prefill_tokens`, `running_context_tokens`)
includes traffic the gateway cannot see (other gateways, direct clients) and cache hits it could
not predict. On each report the tracker stores `offset = reported - tracked` per worker and the
estimate becomes `max(0, tracked + offset)`: exact at report time, then following the gateway's
own changes until the next report replaces the offset. A report older than `max_offset_age_s`
no longer applies.

Part of an offset is disagreement about the gateway's own requests, which a report catches in
passing (a cache hit the gateway did not predict, a token still on its way). That part cannot
outlive its request: when a request that was live at the report leaves a phase (prefill done, or
finished), the offset's component for that phase moves toward zero by the tokens the request had
in it. Without this, a request that ends right after a report would leave its context charged
to the worker until the next report, and routing would shun a worker that is idle.

A report is a consistent snapshot only if the gateway's own view of that worker did not change
while the poll was in flight: a request that finished (or was dispatched) between sending the poll
and reading its reply would otherwise leave a phantom offset of its whole context until the next
report. So `report` takes the time the poll was sent and is ignored when a dispatch, prefill hand
over or finish on that worker happened after it; the previous offset keeps applying. (Single
tokens are not counted as changes: the worker's context grows with them on both sides.)

Priority: each entry keeps its request's priority (vLLM's meaning, lower first). A worker under
the priority policy serves better levels first (a worse prompt's chunks wait, a worse request
running gives up its slot), so the load a request of priority p meets there is that of the
entries of priority <= p: `load(worker, p)` counts only those, and names how many worse ones
are open (`worse_in_flight`, what the worker may preempt for it). The report's offset, which
the gateway cannot split by priority, applies in the tracked share of those entries' tokens.

Not thread-safe: the gateway uses it from its event loop only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class _Entry:
    worker: str
    pending: int      # prefill tokens not yet computed
    context: int      # tokens in the active context (0 until prefill is done)
    since: float      # dispatch time
    priority: int     # the request's (lower first)
    tenant: str       # the request's ("" without keys)


@dataclass(frozen=True)
class TokenLoad:
    prefill_tokens: int
    decode_tokens: int
    in_flight: int
    worse_in_flight: int = 0   # open requests of a worse priority than the one asked for


@dataclass
class _Offset:
    prefill: int
    decode: int
    at: float


class LoadTracker:
    def __init__(self, max_offset_age_s: float = 5.0, clock=time.monotonic) -> None:
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._offsets: dict[str, _Offset] = {}
        self._changed_at: dict[str, float] = {}   # worker -> last dispatch/prefill_done/finish
        self._max_age = max_offset_age_s
        self._clock = clock

    def now(self) -> float:
        """The tracker's clock: pass its value, read before sending a poll, to `report`."""
        return self._clock()

    def dispatch(self, request_id: str, worker: str, pending: int, context: int = 0,
                 priority: int = 0, tenant: str | None = None) -> None:
        now = self._clock()
        self._entries[(request_id, worker)] = _Entry(worker, max(0, pending), max(0, context), now,
                                                     priority, tenant or "")
        self._changed_at[worker] = now

    def prefill_done(self, request_id: str, worker: str, context: int) -> None:
        e = self._entries.get((request_id, worker))
        if e is not None:
            self._settle(e, e.pending, 0)
            e.pending, e.context = 0, context
            self._changed_at[worker] = self._clock()

    def tokens(self, request_id: str, worker: str, n: int = 1) -> None:
        e = self._entries.get((request_id, worker))
        if e is not None:
            e.context += n

    def finish(self, request_id: str, worker: str) -> None:
        e = self._entries.pop((request_id, worker), None)
        if e is not None:
            self._settle(e, e.pending, e.context)
            self._changed_at[worker] = self._clock()

    def _settle(self, e: _Entry, prefill: int, decode: int) -> None:
        """Entry `e` leaves `prefill`/`decode` tokens: the offset forgets its share of them."""
        off = self._offsets.get(e.worker)
        if off is not None and e.since <= off.at:
            off.prefill = _toward_zero(off.prefill, prefill)
            off.decode = _toward_zero(off.decode, decode)

    def _tracked(self, worker: str, priority: int | None = None) -> TokenLoad:
        p = d = n = worse = 0
        for e in self._entries.values():
            if e.worker != worker:
                continue
            if priority is not None and e.priority > priority:
                worse += 1
            else:
                p, d, n = p + e.pending, d + e.context, n + 1
        return TokenLoad(p, d, n, worse)

    def report(self, worker: str, prefill_tokens: int, decode_tokens: int,
               polled_at: float | None = None) -> bool:
        """Store the correction from a worker's report; `polled_at` is `now()` read before the
        poll was sent (None: the report is known to be consistent). False: the report raced
        with one of the gateway's own changes and was ignored."""
        if polled_at is not None and self._changed_at.get(worker, float("-inf")) >= polled_at:
            return False
        t = self._tracked(worker)
        self._offsets[worker] = _Offset(prefill_tokens - t.prefill_tokens,
                                        decode_tokens - t.decode_tokens, self._clock())
        return True

    def open_per_tenant(self) -> dict[str, int]:
        """Requests open on any worker, per tenant ("" without keys)."""
        out: dict[str, int] = {}
        for e in self._entries.values():
            out[e.tenant] = out.get(e.tenant, 0) + 1
        return out

    def open_on(self, worker: str, tenant: str | None) -> int:
        """Requests of `tenant` open on `worker`."""
        tenant = tenant or ""
        return sum(1 for e in self._entries.values() if e.worker == worker and e.tenant == tenant)

    def forget(self, worker: str) -> None:
        """Drop a worker's correction (it left or restarted); its requests end on their own."""
        self._offsets.pop(worker, None)
        self._changed_at.pop(worker, None)

    def load(self, worker: str, priority: int | None = None) -> TokenLoad:
        """The estimated load on `worker`; with `priority`, what a request of that priority meets
        there (entries of priority <= it; `in_flight` counts those, `worse_in_flight` the rest)."""
        t = self._tracked(worker, priority)
        off = self._offsets.get(worker)
        if off is None or self._clock() - off.at > self._max_age:
            return t
        prefill, decode = off.prefill, off.decode
        if t.worse_in_flight:
            whole = self._tracked(worker)
            prefill = _share(prefill, t.prefill_tokens, whole.prefill_tokens)
            decode = _share(decode, t.decode_tokens, whole.decode_tokens)
        return TokenLoad(max(0, t.prefill_tokens + prefill), max(0, t.decode_tokens + decode),
                         t.in_flight, t.worse_in_flight)


def _share(offset: int, part: int, whole: int) -> int:
    """The offset in proportion part / whole of the tracked tokens (all of it when none are)."""
    return offset if whole <= 0 else round(offset * part / whole)


def _toward_zero(x: int, by: int) -> int:
    return x - by if x > by else x + by if x < -by else 0
