"""The scheduler: who runs this step and with how many tokens (policy only).

Each step has a token budget. Running requests go first, decodes (one token each, in admission
order) before unfinished prefills (a chunk each); then waiting requests are admitted, each with
its prefix-cache hit, while budget, sequence slots and blocks last. Prefills, running and
waiting, go shortest remaining first with aging (tandem/engine/prefill_order.py: bounded, so
nothing starves; priority and deadline from the request's context) when the chunk cap
(long_prefill_token_threshold) is set, else in admission and arrival order.
While a request waits and a slot is free, running prefills leave a share of the step (the
chunk cap) to admission, so that a short prompt never queues behind the chunks of long ones
already running; what admission leaves unused goes back to those prefills in the same step.
A background prompt (priority >= background_priority, the queue's batch work) takes at most
`background_chunk_tokens` a step, so that a request arriving while one is computed waits for a
short step only.
A waiting prompt whose next uncached block is being computed by a running prefill (agent
sessions sharing a system prompt) waits until that block is cached rather than computing the
shared prefix twice; later arrivals may be admitted past it meanwhile. A prompt whose tokens
are to be scored (prompt logprobs) skips the prefix cache: only a computed token has logits.
When a running request cannot get a block, the most recently admitted running request not yet
scheduled in this step is preempted (its blocks freed, its tokens recomputed later).

Priority (SchedulerConfig.scheduling_policy "priority", the default; vLLM's meaning: lower first,
ties by arrival; levels and their aging in tandem/engine/priority.py). Every rule above holds
within a level, and levels go first:
- the waiting queue is ordered by level, then as above (the prefill order, or arrival);
- running decodes, then running prefills, go by level, then as above; a running prefill of a
  worse level than the best waiting request leaves the step to admission first (it gets what
  admission leaves, in the same step); the chunk cap counts only waiting requests of the
  prefill's level or a better one (a worse one is admitted after it anyway: a session's turn
  beside a waiting flood of priority 10 is computed in whole steps, not 256-token chunks);
- a waiting request that finds no sequence slot or too few blocks preempts running requests of a
  level worse than its priority, the worst (then the latest admitted) first, as few as make it
  fit, and none when it would not fit even without them all;
- under block pressure the victim is the running request of the worst level (then as above);
  one of them already scheduled in this step is taken back out of it: while a better request is
  present, the blocks a worse one computes in the step are published only at its end;
- KV retained for sessions of a better priority than a waiting request's (aged: its starvation
  bound) is not its to take: it is admitted only when its whole prompt fits in the free blocks
  no hold lists, beside the blocks running prompts still need (it may share retained blocks it
  hits); once running, its next blocks come from those unretained free blocks too, and when
  they run out the worst running requests give way (itself when it is the worst), as under
  block pressure; a request running alone takes retained blocks rather than stop.
Tenants (RequestContext.tenant): within a level, the prefills, running and waiting, of the
tenant that has lately taken the fewest tokens of this engine go first (by usage class,
tandem/engine/tenant_usage.py; then as above), so a tenant sending a tenth of another's tokens
does not queue its prompts behind the other's, even with as many requests running. Nor do that
tenant's prompts yield to another's: only waiting requests of its class or a better one cap its
chunk (long_prefill_token_threshold) or take a reserve of the step from it. While such a prompt
is computed (running, or waiting with a slot free), the prompts of tenants two classes or more
above (about 4x its tokens) take at most background_chunk_tokens a step, so its steps stay
short; and while a tenant of two classes or more below another has been about lately (an
eighth of a step's budget of usage or more), the other's prompts take at most
long_prefill_token_threshold tokens of a step together (not each; at least half the step's
budget), so that the light tenant's next prompt waits for a short step in flight. With one
tenant present nothing changes. The gateway sends such a tenant over its cap
(tandem/router/admission.py).
A prompt whose remaining tokens pass the step's room by no more than the step's decodes (at most
an eighth of the budget) is finished in the step rather than left a few tokens short.
Aging bounds the wait (tandem/engine/priority.py): a request of priority p waits behind newer
requests of a better priority q at most (p - q) * priority_aging_s seconds, then competes as one
of them; a request admitted by preempting others is never preempted for their admission. With
priority 0 everywhere (or under "fcfs", where priority only weighs in the prefill order's key)
every level is one and nothing above changes the order.

KV from outside (the KV connector, tandem/kv/connector.py): at admission the connector may offer
tokens past the local hit; the request is admitted with blocks for them and, when the load is
asynchronous (a pull from a prefill worker), waits until the worker side reports it. A decode may
carry proposed tokens (`Request.proposed_token_ids`): they are scheduled after its last token when
budget and blocks allow, and dropped otherwise; their blocks are cached only once accepted.

The scheduler is the one owner that frees blocks (through the KV cache manager): at preemption,
at finish (unless a connector keeps them, until it reports them released) and after a failed load.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tandem.config import SchedulerConfig
from tandem.engine.prefill_order import PrefillOrder
from tandem.engine.priority import admitted_level, retention_level, waiting_level
from tandem.engine.request import Request, RequestStatus
from tandem.engine.tenant_usage import TenantUsage, usage_class
from tandem.kv.connector import NOTHING_KEPT, ExternalMatch, FinishedKV, KVConnectorScheduler, KVLoad
from tandem.kv.kv_cache_manager import NO_HIT, KVCacheManager, PrefixHit
from tandem.runner.scheduled import ScheduledSeq
from tandem.types import FinishReason


@dataclass(frozen=True)
class SchedulerOutput:
    seqs: list[ScheduledSeq]
    loads: list[KVLoad]              # connector loads to start this step
    preempted: list[Request]
    capacity_finished: list[Request]  # could not grow even alone in the cache: finished (length)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.seqs)


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KVCacheManager,
                 connector: KVConnectorScheduler | None = None,
                 order: PrefillOrder = PrefillOrder(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.kv = kv
        self.connector = connector
        self.order = order
        self.clock = clock               # the requests' arrival clock (aging of priority levels)
        self.by_priority = config.scheduling_policy == "priority"
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.loading: dict[str, tuple[Request, int]] = {}  # admitted, waiting for an asynchronous
        # KV load: the request and the number of tokens its KV covers once loaded
        self.kept: set[str] = set()             # finished; blocks kept by the connector until released
        self._waiting_unsorted = False   # requests joined the queue since it was last sorted
        self._front_order = self._back_order = 0   # queue_order at the queue's front, at its back
        # priority policy: the waiting requests' levels in this step, and when the queue was sorted
        self._levels: dict[str, int] = {}
        self._sorted_levels: dict[str, int] = {}
        self._sorted_tenants: dict[str | None, int] = {}
        # tokens each tenant took lately; in this step each present tenant's usage class (empty
        # with one tenant present), and the least class of a tenant with a prompt to compute
        self.usage = TenantUsage()
        self._classes: dict[str | None, int] = {}
        self._favoured_class: int | None = None
        self._decodes = 0
        self._now = 0.0
        self._lightest_recent: int | None = None   # least usage class of a tenant seen lately
        self._lowest_level = 0           # the best level of any request present in this step
        self.num_preemptions = 0

    # --- bookkeeping ----------------------------------------------------------------
    def add(self, request: Request) -> None:
        self._enqueue(request)

    def _enqueue(self, request: Request, front: bool = False) -> None:
        """Into the waiting queue: at the back, or at the front (a preempted request, a failed
        load). `queue_order` keeps that first-come order for a sort by level."""
        if front:
            self._front_order -= 1
            request.queue_order = self._front_order
            self.waiting.appendleft(request)
        else:
            self._back_order += 1
            request.queue_order = self._back_order
            self.waiting.append(request)
        self._waiting_unsorted = True

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, request: Request) -> FinishedKV:
        """Take a finishing request out of every queue and free its blocks, unless the connector
        keeps them (then they are freed by `release`)."""
        if request in self.running:
            self.running.remove(request)
        elif request.request_id in self.loading:
            del self.loading[request.request_id]
        else:
            try:
                self.waiting.remove(request)
            except ValueError:
                pass
        done = NOTHING_KEPT
        if self.connector is not None:
            hashes = self.kv.block_hashes(request.request_id, request.all_token_ids, request.cache_keys)
            done = self.connector.request_finished(request, self.kv.block_ids(request.request_id), hashes,
                                                   admitted=request.first_scheduled_time is not None)
        if done.keep_blocks:
            self.kept.add(request.request_id)
        else:
            self.kv.free(request.request_id)
        return done

    def release(self, request_id: str) -> None:
        """The connector is done with a finished request's kept blocks: free them."""
        if request_id in self.kept:
            self.kept.discard(request_id)
            self.kv.free(request_id)

    def load_done(self, request: Request) -> None:
        """The request's external KV arrived: it runs from the next step."""
        _, request.num_computed_tokens = self.loading.pop(request.request_id)
        self.kv.cache_computed(request.request_id, request.all_token_ids,
                               request.num_computed_tokens, request.cache_keys)
        request.status = RequestStatus.RUNNING
        self.running.append(request)

    def load_failed(self, request: Request) -> None:
        """A load failed: its blocks hold undefined data; free them and recompute from the front.
        (A synchronous load fails before the step's forward: its request is already running.)"""
        if request.request_id in self.loading:
            del self.loading[request.request_id]
        else:
            self.running.remove(request)
        self.kv.free(request.request_id)
        # the loaded tokens were no hit after all: the lookup is counted again at re-admission
        self.kv.record_lookup(-request.num_prompt_tokens, -request.num_cached_tokens)
        request.lookup_counted = False
        request.num_cached_tokens = 0
        request.external_kv_failed = True
        request.num_computed_tokens = 0
        request.status = RequestStatus.WAITING
        self._enqueue(request, front=True)

    @staticmethod
    def computed(seq: ScheduledSeq, num_accepted: int) -> None:
        """After the step: the request's KV is computed through its own scheduled tokens and the
        first `num_accepted` proposals (the KV of the others is garbage, to be overwritten)."""
        seq.request.num_computed_tokens += seq.num_new_tokens - len(seq.proposed) + num_accepted

    def publish_accepted(self, seq: ScheduledSeq) -> None:
        """Once accepted proposals are the request's tokens: cache the blocks they fill, and drop
        blocks that only rejected proposals reached."""
        req = seq.request
        if seq.proposed and not req.finished:
            self.kv.cache_computed(req.request_id, req.all_token_ids, req.num_computed_tokens, req.cache_keys)
            self.kv.truncate(req.request_id, req.num_tokens)

    # --- the step ---------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        seqs: list[ScheduledSeq] = []
        preempted: list[Request] = []
        capacity_finished: list[Request] = []

        scheduled: set[str] = set()
        unpublished: set[str] = set()     # scheduled, their blocks published at the step's end
        self._update_levels()
        self._now = self.clock()
        self._classes = self._tenant_classes()
        self._favoured_class = self._least_class_with_a_prompt()
        self._lightest_recent = self._lightest_usage_class()
        # running prefills of a worse level than the best waiting request (priority), or of the
        # same level and a higher tenant class, come after admission
        best_waiting = self._best_waiting()
        outranked = reserved = False
        self._decodes = 0   # decodes in this step so far (they come first): a finishing prompt's slack
        # decodes first, so that a long prefill chunk never delays a stream's next token
        for req in self._running_order():
            if budget <= 0:
                break
            if req.status is not RequestStatus.RUNNING:
                continue  # preempted earlier in this step
            remaining = req.num_tokens - req.num_computed_tokens
            reserve = self._admission_reserve(req) if remaining > 1 else 0
            reserved = reserved or reserve > 0
            room = budget - reserve
            if remaining > 1 and best_waiting is not None and self._rank(req) > best_waiting:
                outranked, room = True, 0
            if room <= 0:
                continue  # a prefill: admission has its share first, leftovers come back below
            num_new = 1 if remaining == 1 else min(remaining, self._finishing_room(remaining, room),
                                                   self._chunk_cap(req, 0), self._request_cap(req, seqs))
            if num_new <= 0:
                continue  # a heavier tenant's prompt: the step's share for such prompts is taken
            proposed = self._proposals(req, room) if remaining == 1 else ()
            num_new += len(proposed)
            level = self._growth_level(req)
            while self.kv.allocate(req.request_id, req.num_computed_tokens + num_new, priority=level) is None:
                victim = self._victim(scheduled)
                if victim is req and level is not None and len(self.running) == 1:
                    level = None   # alone: nothing of its level or worse gives way, so the holds do
                    continue
                self.running.remove(victim)
                if victim is req and not self.running:
                    capacity_finished.append(req)  # alone in the cache and still no room
                    break
                if victim.request_id in scheduled:
                    budget += self._unschedule(victim, seqs, scheduled)
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            else:
                publish = not self._may_give_way(req)
                seqs.append(self._scheduled(req, num_new, proposed, publish))
                scheduled.add(req.request_id)
                if not publish:
                    unpublished.add(req.request_id)
                budget -= num_new
                self._decodes += remaining == 1

        loads: list[KVLoad] = []
        if not preempted:
            budget, deferred = self._admit(seqs, loads, budget, scheduled, preempted)
            if (reserved or deferred or outranked) and budget > 0:
                # a prompt deferred for an in-flight prefix is no reason to cap the others' chunks
                self._extend_prefills(seqs, budget, capped=len(self.waiting) > deferred)
        for seq in seqs:
            if seq.request.request_id in unpublished:
                self._publish(seq)
        now = self.clock()
        for seq in seqs:
            self.usage.charge(seq.request.context.tenant, seq.num_new_tokens, now)
        self.usage.prune(now)
        for req in capacity_finished:
            req.finish_reason = FinishReason.LENGTH
        return SchedulerOutput(seqs, loads, preempted, capacity_finished)

    def _admit(self, seqs: list[ScheduledSeq], loads: list[KVLoad], budget: int, scheduled: set[str],
               preempted: list[Request]) -> tuple[int, int]:
        """Admit waiting requests into the step; returns the budget left and how many prompts
        were deferred for an in-flight prefix (they stay at the front of the queue). Running
        requests preempted for them (priority policy) join `preempted`, and the queue after
        admission."""
        self._sort_waiting()
        in_flight = self._in_flight_hashes(seqs) if self.waiting else set()
        deferred: list[Request] = []
        first_victim = len(preempted)
        try:
            while self.waiting and budget > 0 and \
                    (self._slot_free() or self._outranks_running(self.waiting[0])):
                req = self.waiting[0]
                # a prompt to be scored is computed whole: cached blocks have no logits
                hit = NO_HIT if req.scores_prompt else \
                    self.kv.lookup_prefix(req.request_id, req.all_token_ids, req.cache_keys)
                # nor does KV from outside (a scored prompt is never offered to the connector)
                match = None if self.connector is None or req.external_kv_failed or req.scores_prompt \
                    else self.connector.match(req, hit.num_tokens, self.kv.block_size)
                if match is not None and match.num_external_tokens > 0:
                    if self._admit_external(req, hit, match, loads, seqs, budget,
                                            scheduled, preempted) is None:
                        break
                    budget = self._budget_left(seqs)   # victims taken out of the step gave theirs back
                    continue
                if not req.scores_prompt and self._continues_in_flight(req, hit, in_flight):
                    deferred.append(self.waiting.popleft())  # admitted once those blocks are cached
                    continue
                num_new = req.num_tokens - hit.num_tokens
                if num_new > budget and not self.config.enable_chunked_prefill and seqs:
                    break
                num_new = min(num_new, self._finishing_room(num_new, budget), self._chunk_cap(req, 1),
                              self._request_cap(req, seqs))
                if num_new <= 0:
                    break     # a heavier tenant's prompt, and the step's share for those is taken
                tokens = hit.num_tokens + num_new
                if self._allocate_admitting(req, tokens, hit, seqs, scheduled, preempted) is None:
                    break
                self.waiting.popleft()
                self._on_admitted(req, hit.num_tokens)
                req.num_computed_tokens = hit.num_tokens
                req.status = RequestStatus.RUNNING
                self.running.append(req)
                seqs.append(self._scheduled(req, num_new))
                in_flight.update(self._unscheduled_prompt_hashes(req, hit.num_tokens + num_new))
                budget = self._budget_left(seqs)
        finally:
            # requests preempted for a better one join the queue after admission, not to be
            # admitted again in the step that preempted them (the next sort puts them in place)
            for victim in preempted[first_victim:]:
                self._enqueue(victim, front=True)
            self.waiting.extendleft(reversed(deferred))   # back at the front, in their order
        return budget, len(deferred)

    def _finishing_room(self, remaining: int, room: int) -> int:
        """The tokens a prompt with `remaining` to compute may take of a step with `room` left: all
        of them when they pass the room by no more than the step's decodes (at most an eighth of
        the budget; one more step for its last few tokens would cost its first token a step)."""
        slack = min(self._decodes, self.config.max_num_batched_tokens // 8)
        return remaining if room > 0 and remaining <= room + slack else room

    def _budget_left(self, seqs: list[ScheduledSeq]) -> int:
        return self.config.max_num_batched_tokens - sum(s.num_new_tokens for s in seqs)

    def _prompt_blocks_owed(self) -> int:
        """Blocks the running requests' prompts still need (their later prefill chunks)."""
        bs = self.kv.block_size
        return sum(max(0, -(-r.num_tokens // bs) - len(self.kv.block_ids(r.request_id)))
                   for r in self.running if r.num_computed_tokens < r.num_tokens - 1)

    def _slot_free(self) -> bool:
        return len(self.running) + len(self.loading) < self.config.max_num_seqs

    def _outranks_running(self, req: Request) -> bool:
        """Priority policy: a running request has a level worse than req's priority."""
        return self.by_priority and any(admitted_level(r) > req.context.priority for r in self.running)

    def _allocate_admitting(self, req: Request, num_tokens: int, hit: PrefixHit, seqs: list[ScheduledSeq],
                            scheduled: set[str], preempted: list[Request]) -> list[int] | None:
        """A sequence slot and blocks for the first `num_tokens` of a request being admitted;
        the new block ids, or None. Under the priority policy, running requests of a level worse
        than its priority give way when it does not fit otherwise: the worst level first, then
        the latest admitted, as few as make it fit, and none when it would not fit without them
        all. Comparing the waiting request's own priority (not its aged level) with running
        levels means that a victim can never preempt, in turn, the request it gave way to."""
        level = retention_level(req, self.clock(), self.config.priority_aging_s) if self.by_priority else None
        if level is not None and self.kv.pool.protects(level) and not self.kv.can_allocate(
                req.request_id, req.num_tokens, hit, level, reserve=self._prompt_blocks_owed()):
            # KV retained for better sessions stays theirs: admitted only with room for its whole
            # prompt in the unretained blocks, beside what running prompts still need, since
            # its later chunks grow into any free block
            return None
        if self._slot_free():
            ids = self.kv.allocate(req.request_id, num_tokens, hit, level)
            if ids is not None or not self.by_priority:
                return ids
        victims = [r for r in self._victim_order(scheduled) if admitted_level(r) > req.context.priority]
        slots = self.config.max_num_seqs - len(self.running) - len(self.loading)
        if len(victims) < 1 - slots or not self.kv.can_allocate_without(
                req.request_id, num_tokens, hit, [v.request_id for v in victims], level):
            return None
        for victim in victims:
            self.running.remove(victim)
            if victim.request_id in scheduled:
                self._unschedule(victim, seqs, scheduled)
            self._preempt(victim, requeue=False)
            preempted.append(victim)
            if self._slot_free():
                ids = self.kv.allocate(req.request_id, num_tokens, hit, level)
                if ids is not None:
                    return ids
        raise AssertionError("can_allocate_without promised room that freeing the victims did not make")

    def _growth_level(self, req: Request) -> int | None:
        """Priority policy: the level at which a running request takes its next blocks, when KV
        retained for sessions of a better priority is kept from it (as at admission: aged, so
        the starvation bound holds); None: any free block. A request that finds only such blocks
        free makes the worst running requests give way (itself, when it is the worst), unless it
        runs alone."""
        if not self.by_priority:
            return None
        level = retention_level(req, self.clock(), self.config.priority_aging_s)
        return level if self.kv.pool.protects(level) else None

    def _in_flight_hashes(self, seqs: list[ScheduledSeq]) -> set[int]:
        """Hashes of the prompt blocks that running prefills compute after this step."""
        if not self.kv.enable_caching:
            return set()
        scheduled = {s.request.request_id: s.num_new_tokens for s in seqs}
        out: set[int] = set()
        for req in self.running:
            out.update(self._unscheduled_prompt_hashes(
                req, req.num_computed_tokens + scheduled.get(req.request_id, 0)))
        return out

    def _unscheduled_prompt_hashes(self, req: Request, end: int) -> list[int]:
        """Hashes of req's full prompt blocks past token `end` (none once its prompt is scheduled)."""
        if not self.kv.enable_caching or end >= req.num_prompt_tokens:
            return []
        hashes = self.kv.block_hashes(req.request_id, req.all_token_ids, req.cache_keys)
        return hashes[end // self.kv.block_size:req.num_prompt_tokens // self.kv.block_size]

    def _continues_in_flight(self, req: Request, hit: PrefixHit, in_flight: set[int]) -> bool:
        """The waiting prompt's first uncached block is one a running prefill is computing: it
        waits for it (and hits it) instead of computing the shared prefix a second time."""
        if not in_flight:
            return False
        hashes = self.kv.block_hashes(req.request_id, req.all_token_ids, req.cache_keys)
        first_missing = len(hit.blocks)
        return first_missing < len(hashes) and hashes[first_missing] in in_flight

    def _admission_reserve(self, req: Request) -> int:
        """Tokens of this step that the running prefill `req` leaves to waiting requests: the
        chunk cap while one of its level and tenant class or better waits and a sequence slot is
        free, else 0."""
        cfg = self.config
        if not (cfg.long_prefill_token_threshold and cfg.enable_chunked_prefill and self.waiting):
            return 0
        if len(self.running) + len(self.loading) >= cfg.max_num_seqs or not self._waiting_ahead(req):
            return 0
        return min(cfg.long_prefill_token_threshold, cfg.max_num_batched_tokens // 2)

    def _extend_prefills(self, seqs: list[ScheduledSeq], budget: int, capped: bool) -> None:
        """Give the budget admission left to running prefills, in admission order: a chunk cut
        short by the reserve grows (to at most the chunk cap if `capped`), one skipped gets its
        chunk now."""
        index = {s.request.request_id: i for i, s in enumerate(seqs)}
        for req in self._running_order():
            if budget <= 0:
                return
            i = index.get(req.request_id)
            done = seqs[i].num_new_tokens if i is not None else 0
            remaining = req.num_tokens - req.num_computed_tokens - done
            if req.status is not RequestStatus.RUNNING or remaining <= 0 or (i is None and remaining == 1):
                continue  # finished this step, or a decode (never extended; scheduled above)
            cap = self._chunk_cap(req, 0) if capped else self.config.max_num_batched_tokens
            extra = min(remaining, budget, min(cap, self._request_cap(req, seqs)) - done)
            if extra <= 0 or self.kv.allocate(req.request_id, req.num_computed_tokens + done + extra,
                                              priority=self._growth_level(req)) is None:
                continue
            seq = self._scheduled(req, done + extra)
            if i is None:
                seqs.append(seq)
            else:
                seqs[i] = seq
            budget -= extra

    # --- prefill order ----------------------------------------------------------------
    def _ordered(self) -> bool:
        """Prefills go by PrefillOrder's key (else in admission / arrival order)."""
        return bool(self.config.long_prefill_token_threshold and self.config.enable_chunked_prefill)

    def _running_order(self) -> list[Request]:
        """Running requests: decodes in admission order, then prefills by their tenant's usage
        class (least first), then by key (stable sorts); under the priority policy each by level
        first."""
        def is_prefill(r: Request) -> bool:
            return r.num_tokens - r.num_computed_tokens > 1

        def level(r: Request) -> int:
            return admitted_level(r) if self.by_priority else 0
        ordered = self._ordered()

        def among_prefills(r: Request) -> tuple[int, float]:
            key = self.order.key(r, r.num_tokens - r.num_computed_tokens) if ordered else 0.0
            return self._classes.get(r.context.tenant, 0), key
        return sorted(self.running, key=lambda r: (is_prefill(r), level(r),
                                                   among_prefills(r) if is_prefill(r) else (0, 0.0)))

    def _sort_waiting(self) -> None:
        """Waiting requests by level (priority policy), then by key, their remaining work
        estimated from the prefix cache now."""
        # only when requests joined or a level changed: admission pops from the front and
        # deferral keeps the order, and aging moves every key alike, so the order holds until
        # then (re-sorting every step would look every waiting prompt up in the prefix cache
        # each step)
        levels_changed = any(self._sorted_levels.get(rid) != lv for rid, lv in self._levels.items())
        share = self._classes
        if not (self._waiting_unsorted or levels_changed or share != self._sorted_tenants) or \
                len(self.waiting) < 2 or not (self._ordered() or self.by_priority or share):
            return
        self._waiting_unsorted = False
        self._sorted_levels = dict(self._levels)
        self._sorted_tenants = share
        if self._ordered():
            ordered = sorted(self.waiting, key=lambda r: (self._levels.get(r.request_id, 0),
                                                          share.get(r.context.tenant, 0),
                                                          self.order.key(r, self._waiting_work(r))))
        else:
            ordered = sorted(self.waiting, key=lambda r: (self._levels.get(r.request_id, 0),
                                                          share.get(r.context.tenant, 0), r.queue_order))
        self.waiting.clear()
        self.waiting.extend(ordered)

    def _tenant_classes(self) -> dict[str | None, int]:
        """Usage class of each tenant present (running or waiting), while more than one is
        (else empty: one tenant's requests keep their order)."""
        tenants = {r.context.tenant for r in self.running} | {r.context.tenant for r in self.waiting}
        if len(tenants) < 2:
            return {}
        return {t: self._usage_class(t) for t in tenants}

    # --- priority levels (tandem/engine/priority.py) ------------------------------------
    def _update_levels(self) -> None:
        """Priority policy: the waiting requests' levels at this step's time, and the best level
        of any request present."""
        if not self.by_priority:
            return
        admitted = [*self.running, *(r for r, _ in self.loading.values())]
        priorities = [r.context.priority for r in self.waiting] + [r.context.priority for r in admitted]
        best = min(priorities, default=0)
        now = self.clock()
        aging_s = self.config.priority_aging_s
        self._levels = {r.request_id: waiting_level(r, now, best, aging_s) for r in self.waiting}
        self._lowest_level = min([*self._levels.values(), *(admitted_level(r) for r in admitted)], default=0)

    def _may_give_way(self, req: Request) -> bool:
        """A running request that a better one present may still preempt in this step: the blocks
        it computes in the step are published at the step's end, once it is sure to run."""
        return self.by_priority and admitted_level(req) > self._lowest_level

    def _victim_order(self, scheduled: set[str]) -> list[Request]:
        """Running requests in the order they give way: the latest admitted first among those
        not scheduled yet in this step, then the scheduled ones; under the priority policy the
        worst level first (a scheduled one of a worse level may give way: `_may_give_way`)."""
        def key(item: tuple[int, Request]) -> tuple[int, bool, int]:
            i, r = item
            return admitted_level(r) if self.by_priority else 0, r.request_id not in scheduled, i
        return [r for _, r in sorted(enumerate(self.running), key=key, reverse=True)]

    def _victim(self, scheduled: set[str]) -> Request:
        """Who gives way when a running request cannot get a block (the request itself is a
        candidate: it is not scheduled yet)."""
        return self._victim_order(scheduled)[0]

    @staticmethod
    def _unschedule(req: Request, seqs: list[ScheduledSeq], scheduled: set[str]) -> int:
        """Take a request (its blocks not published) back out of the step; returns its tokens."""
        i = next(i for i, s in enumerate(seqs) if s.request is req)
        scheduled.discard(req.request_id)
        return seqs.pop(i).num_new_tokens

    def _waiting_work(self, req: Request) -> int:
        """Tokens a waiting request would compute: past its local prefix hit; 1 when its KV is
        to come from another worker (the pull is not this worker's compute)."""
        if req.kv_handle is not None and not req.external_kv_failed:
            return 1
        if req.scores_prompt:
            return req.num_tokens
        return req.num_tokens - self.kv.lookup_prefix(req.request_id, req.all_token_ids,
                                                       req.cache_keys).num_tokens

    def _request_cap(self, req: Request, seqs: list[ScheduledSeq]) -> int:
        """Largest prefill chunk of this request in a step holding `seqs` (its own chunk, if any,
        not counted): a background prompt is computed in chunks of at most
        background_chunk_tokens, so that a request arriving meanwhile waits for one short step,
        not for a long chunk of it; so is the prompt of a tenant two usage classes or more above
        another tenant with a prompt to compute in this step (its steps stay short until that
        prompt is done). And while a tenant that lately took a quarter of the tokens of another or
        less is about (`_lightest_recent`), the prompts of the heavier tenants take at most
        `_heavy_share` tokens of a step together: the light tenant's next prompt, whenever it
        comes, waits for a short step in flight."""
        cfg = self.config
        background = cfg.background_chunk_tokens and req.context.priority >= cfg.background_priority
        favoured = self._favoured_class
        over_share = favoured is not None and self._classes.get(req.context.tenant, 0) >= favoured + 2
        if cfg.background_chunk_tokens and (background or over_share):
            return cfg.background_chunk_tokens
        if self._heavy(req):
            taken = sum(s.num_new_tokens for s in seqs if s.request is not req and self._heavy(s.request)
                        and s.request.num_tokens - s.request.num_computed_tokens > 1)
            return max(0, self._heavy_share() - taken)
        return cfg.max_num_batched_tokens

    def _heavy_share(self) -> int:
        """Prefill tokens of a step the heavier tenants' prompts take together while a light one is
        about: the chunk cap, but never less than half the step (a large step budget keeps at least
        half of its prefill throughput)."""
        cfg = self.config
        return max(cfg.long_prefill_token_threshold, cfg.max_num_batched_tokens // 2)

    def _heavy(self, req: Request) -> bool:
        """The request's tenant is two usage classes or more above the lightest tenant about lately."""
        lightest = self._lightest_recent
        return lightest is not None and bool(self.config.long_prefill_token_threshold) and \
            self._usage_class(req.context.tenant) >= lightest + 2

    def _usage_class(self, tenant: str | None) -> int:
        return usage_class(self.usage.of(tenant, self._now), self.config.max_num_batched_tokens)

    def _lightest_usage_class(self) -> int | None:
        """The least usage class among the tenants that took at least an eighth of a step's
        budget lately (about the last half-minute for one request), when more than one did."""
        floor = self.config.max_num_batched_tokens / 8
        recent = [t for t in self.usage.tenants() if self.usage.of(t, self._now) >= floor]
        return min(map(self._usage_class, recent)) if len(recent) > 1 else None

    def _least_class_with_a_prompt(self) -> int | None:
        """Among tenants with a prompt to compute in this step (a running prefill, or a waiting
        request while a sequence slot is free), the least usage class, when some tenant present
        is two classes or more above it; else None (near-equal tenants keep whole chunks)."""
        if not self._classes:
            return None
        tenants = {r.context.tenant for r in self.running if r.num_tokens - r.num_computed_tokens > 1}
        if self._slot_free():
            tenants.update(r.context.tenant for r in self.waiting)
        least = min((self._classes.get(t, 0) for t in tenants), default=None)
        return least if least is not None and least + 2 <= max(self._classes.values()) else None

    def _rank(self, req: Request) -> tuple[int, int]:
        """A running request's (level, tenant class): less goes first."""
        return admitted_level(req) if self.by_priority else 0, self._classes.get(req.context.tenant, 0)

    def _best_waiting(self) -> tuple[int, int] | None:
        """The best (level, tenant class) of a waiting request; the class counts only while a
        sequence slot is free (else none is admitted before the running ones go on)."""
        if not self.waiting or not (self._levels or self._classes):
            return None
        classes = self._classes if self._slot_free() else {}
        return min(((self._levels.get(r.request_id, 0), classes.get(r.context.tenant, 0))
                    for r in self.waiting), default=None)

    def _waiting_ahead(self, req: Request) -> int:
        """Waiting requests that `req` (running or waiting) does not go before: of its level or a
        better one (priority policy) and of its tenant's usage class or a lesser one; the others
        are admitted after it anyway. A waiting `req` counts itself."""
        level = None if not self.by_priority else self._levels[req.request_id] \
            if req.request_id in self._levels else admitted_level(req)
        mine = self._classes.get(req.context.tenant, 0)
        return sum(1 for r in self.waiting
                   if (level is None or self._levels.get(r.request_id, r.context.priority) <= level)
                   and self._classes.get(r.context.tenant, 0) <= mine)

    def _chunk_cap(self, req: Request, others_behind: int) -> int:
        """Largest prefill chunk of `req` while more than `others_behind` requests that it does
        not go before wait for admission (`_waiting_ahead`)."""
        cap = self.config.long_prefill_token_threshold
        if not cap or len(self.waiting) <= others_behind:
            return self.config.max_num_batched_tokens
        return cap if self._waiting_ahead(req) > others_behind else self.config.max_num_batched_tokens

    def _admit_external(self, req: Request, hit: PrefixHit, match: ExternalMatch, loads: list[KVLoad],
                        seqs: list[ScheduledSeq], budget: int, scheduled: set[str],
                        preempted: list[Request]) -> int | None:
        """Admit a request with blocks for the connector's tokens; returns the tokens it computes
        in this step, or None when the blocks are not there (it stays first in line).

        An asynchronous load: the request waits (WAITING_FOR_KV) until the worker side reports it.
        A synchronous one completes before this step's forward pass, so the prompt goes on in the
        same step; its loaded blocks reach the prefix cache only from the next step, once the
        load is known to have succeeded."""
        keep = match.num_local_tokens // self.kv.block_size
        local = PrefixHit(hit.blocks[:keep], keep * self.kv.block_size)
        end = local.num_tokens + match.num_external_tokens
        cap = self._chunk_cap(req, 1)
        num_new = 0 if match.load_async else min(req.num_tokens - end, budget, cap, self._request_cap(req, seqs))
        if not match.load_async and num_new <= 0:
            return None   # no budget left for its next chunk (or a connector offered every token)
        new_ids = self._allocate_admitting(req, end + num_new, local, seqs, scheduled, preempted)
        if new_ids is None:
            return None
        self.waiting.popleft()
        num_loaded_blocks = -(-end // self.kv.block_size) - keep
        loads.append(self.connector.load(req, match, keep, new_ids[:num_loaded_blocks]))
        self._on_admitted(req, end if match.cache_hit else local.num_tokens)
        if match.load_async:
            req.status = RequestStatus.WAITING_FOR_KV
            self.loading[req.request_id] = (req, end)
            return 0
        req.num_computed_tokens = end
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        seqs.append(ScheduledSeq(req, num_new, sample=end + num_new == req.num_tokens))
        return num_new

    def _on_admitted(self, req: Request, hit_tokens: int) -> None:
        if self.by_priority:
            level = self._levels.get(req.request_id, req.context.priority)
            req.admitted_level = level if req.admitted_level is None else min(level, req.admitted_level)
        if req.first_scheduled_time is None:
            req.first_scheduled_time = time.monotonic()
        if not req.lookup_counted:   # once: a preempted request's recompute is no new lookup
            req.lookup_counted = True
            req.num_cached_tokens = hit_tokens
            self.kv.record_lookup(req.num_prompt_tokens, hit_tokens)

    def _proposals(self, req: Request, room: int) -> tuple[int, ...]:
        """The request's proposed tokens that fit this step's room and the free blocks (a decode's
        own token comes first); none when they do not fit, so a draft never preempts anyone."""
        k = min(len(req.proposed_token_ids), room - 1)
        if k <= 0 or self.kv.allocate(req.request_id, req.num_computed_tokens + 1 + k) is None:
            return ()
        return tuple(req.proposed_token_ids[:k])

    def _scheduled(self, req: Request, num_new: int, proposed: tuple[int, ...] = (),
                   publish: bool = True) -> ScheduledSeq:
        own_end = req.num_computed_tokens + num_new - len(proposed)
        seq = ScheduledSeq(req, num_new, sample=own_end == req.num_tokens, proposed=proposed)
        if publish:
            self._publish(seq)
        return seq

    def _publish(self, seq: ScheduledSeq) -> None:
        # the request's own tokens are cached now (their KV is written within this step, before any
        # attention reads it); proposals only once accepted
        req = seq.request
        own_end = req.num_computed_tokens + seq.num_new_tokens - len(seq.proposed)
        self.kv.cache_computed(req.request_id, req.all_token_ids, own_end, req.cache_keys)

    def _preempt(self, req: Request, requeue: bool = True) -> None:
        """Free a running request's blocks; it recomputes its tokens once admitted again (at the
        front of the queue, unless the caller queues it)."""
        self.kv.free(req.request_id)
        req.proposed_token_ids = []
        req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        if requeue:
            self._enqueue(req, front=True)
