"""KV retention across tool calls, the mechanism: sessions, their holds on blocks, learned gaps.

The engine reports a session's turns: `finished` when one ends (with its cached blocks, before
the scheduler frees them), `arrived` when the next one comes, `expire` each step. The policy
(tandem/kv/retention.py) says what a turn's end means and how long to hold; the block pool
(tandem/kv/block_pool.py) keeps the books. One hold per session, named by its key.

A session's key is its `session_id` (x-session-affinity, or the gateway's conversation
fingerprint) scoped by the request's tenant and cache salt, so two tenants' equal ids are two
sessions, also where their KV is shared (--share-prefix-cache, --shared-prefixes). Gaps are
learned per session and per tenant; both tables are bounded (`max_sessions`, least recently used
forgotten first).

Engine thread only.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.config import RetentionConfig
from tandem.kv.block_pool import BlockPool, KVBlock
from tandem.kv.retention import (GapEstimate, TurnEnd, first_to_release, observe, over_share,
                                 retain_for, share_limit)
from tandem.types import TURN_GAP_BUCKETS, AgentTurn, RequestContext


def session_key(context: RequestContext) -> str | None:
    """The session's key on this worker: its id within its tenant and cache salt (never the KV
    partition, which leaves the tenant out where the operator shares KV); None without an id."""
    if context.session_id is None:
        return None
    return repr((context.tenant, context.cache_salt, context.session_id))


@dataclass
class _Session:
    gap: GapEstimate | None = None
    ended_at: float | None = None   # end of a retained turn whose next turn has not come yet


@dataclass
class _Hold:
    deadline: float


class SessionRetainer:
    def __init__(self, pool: BlockPool, config: RetentionConfig) -> None:
        self.pool = pool
        self.config = config
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._tenants: OrderedDict[str, GapEstimate] = OrderedDict()
        self._holds: dict[str, _Hold] = {}
        self._next_deadline = float("inf")
        self.hits = 0       # next turns that arrived while their session's hold held blocks
        self.expired = 0    # holds that reached their deadline
        self.gap_counts = [0] * (len(TURN_GAP_BUCKETS) + 1)   # per bucket (+Inf last), not cumulative
        self.gap_sum = 0.0

    @property
    def enabled(self) -> bool:
        return self.config.enabled and self.pool.enable_caching

    # --- a session's turns -----------------------------------------------------------------
    def arrived(self, key: str | None, tenant: str | None, now: float) -> None:
        """A turn of session `key` arrives: learn the gap since its retained turn ended. Its hold
        stays until the turn finishes (and supersedes it) or `default_gap_s` from now passes: a
        turn may wait to be scheduled, and under the pressure retention exists for, unheld blocks
        would be taken meanwhile."""
        if key is None or not self.enabled:
            return
        s = self._sessions.get(key)
        if s is None or s.ended_at is None:
            return
        self._sessions.move_to_end(key)
        gap = max(0.0, now - s.ended_at)
        s.ended_at = None
        s.gap = observe(s.gap, gap, self.config)
        t = tenant or ""
        self._tenants[t] = observe(self._tenants.get(t), gap, self.config)
        self._tenants.move_to_end(t)
        self._trim(self._tenants)
        self.gap_counts[bisect.bisect_left(TURN_GAP_BUCKETS, gap)] += 1
        self.gap_sum += gap
        hold = self._holds.get(key)
        if hold is not None:
            if self.pool.hold_blocks(key):
                self.hits += 1
            hold.deadline = max(hold.deadline, now + self.config.default_gap_s)
            self._next_deadline = min(self._next_deadline, hold.deadline)

    def finished(self, key: str | None, tenant: str | None, end: TurnEnd, retain_s: float,
                 blocks: Sequence[KVBlock], tag: object, now: float, priority: int = 0) -> None:
        """A turn of session `key` ended as `end`; `blocks`: its cached blocks in sequence order
        (prompt and output); `retain_s`: how long to hold them (RETAIN); `tag`: passed back with
        any of them demoted (its KV partition); `priority`: the turn's (the hold's, which keeps
        its blocks from worse-priority admissions: BlockPool.protects)."""
        if key is None or not self.enabled:
            return
        self._release(key, cold=False)   # an earlier hold of the session: this turn supersedes it
        if end is TurnEnd.NONE:
            return
        s = self._sessions.get(key) or _Session()
        self._sessions[key] = s
        self._sessions.move_to_end(key)
        self._trim(self._sessions)
        if end is TurnEnd.ENDED:
            s.ended_at = None
            self.pool.mark_cold(blocks, own_refs=1)   # the ending request still holds its blocks
            return
        s.ended_at = now
        blocks = self._fit_share(blocks, now + retain_s)
        if not blocks:
            return
        self.pool.retain(key, blocks, tag, priority)
        self._holds[key] = _Hold(now + retain_s)
        self._next_deadline = min(self._next_deadline, now + retain_s)

    def retain_seconds(self, key: str | None, tenant: str | None, agent: AgentTurn) -> float:
        """How long a RETAIN turn of `key` is held (the hint, else the learned gap)."""
        s = self._sessions.get(key) if key is not None else None
        return retain_for(agent, s.gap if s else None, self._tenants.get(tenant or ""), self.config)

    def expire(self, now: float) -> None:
        """End the holds past their deadline: idle past their learned gap, their blocks go first."""
        if now < self._next_deadline:
            return
        for key, hold in list(self._holds.items()):
            if hold.deadline <= now:
                self.expired += 1
                self._release(key, cold=True)
        self._next_deadline = min((h.deadline for h in self._holds.values()), default=float("inf"))

    # --- helpers -----------------------------------------------------------------------------
    def _fit_share(self, blocks: Sequence[KVBlock], deadline: float) -> Sequence[KVBlock]:
        """Release the holds due after `deadline` (the latest first) until `blocks` fit the
        share; past that, keep their prefix."""
        limit = share_limit(self.pool.num_blocks, self.config)
        order = first_to_release([(k, h.deadline) for k, h in self._holds.items()], deadline)
        new = self.pool.new_for_retention(blocks)
        while over_share(self.pool.num_retained, new, limit) and order:
            self._release(order.pop(0), cold=False)
            new = self.pool.new_for_retention(blocks)
        room = limit - self.pool.num_retained
        kept: list[KVBlock] = []
        for b in blocks:
            adds = not b.retained
            if adds and room <= 0:
                break
            room -= adds
            kept.append(b)
        return kept

    def _release(self, key: str, cold: bool) -> None:
        if self._holds.pop(key, None) is not None:
            self.pool.unretain(key, cold=cold)

    def _trim(self, table: OrderedDict) -> None:
        while len(table) > self.config.max_sessions:
            key, _ = table.popitem(last=False)
            if table is self._sessions:
                self._release(key, cold=True)

    def gap_histogram(self) -> tuple[int, ...]:
        """Cumulative counts per TURN_GAP_BUCKETS bound, +Inf last (Prometheus' convention)."""
        out, total = [], 0
        for n in self.gap_counts:
            total += n
            out.append(total)
        return tuple(out)
