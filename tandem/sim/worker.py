"""A simulated worker: continuous batching with chunked prefill over a prefix-cached block pool.

Each step follows tandem's scheduler (tandem/engine/scheduler.py) in its main rules:
- budget `max_num_batched_tokens` per step; running decodes first, one token each;
- then running prefills and waiting prompts in tandem's own prefill order
  (tandem/engine/prefill_order.py: shortest remaining first with aging; called, not copied);
  while prompts wait, one prompt's chunk is capped at `long_prefill_token_threshold`;
- admission takes the prompt's prefix-cache hit, then the longest run the host tier or the
  shared store holds past it (loaded, the request waits `load time` before computing), and
  blocks for its whole context (prompt + output: no preemption in the simulator); at most
  `max_num_seqs` requests run;
- a step takes the cost model's time for its sequences; its tokens appear when it ends.
Jobs: "whole" (prompt and every output token here), "prefill" (prompt and the first token; its
blocks stay pinned until the decode worker has pulled them), "decode" (pull the prompt's KV
from the prefill worker, then decode from the second token on). A whole or decode job that
finishes caches its output's full blocks when the trace names them (`SimRequest.output_hashes`).

The worker satisfies the router's `WorkerState` protocol (url, role, healthy, draining, stats,
block_size, hash_seed), so the real Router reads it as it reads the gateway's registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tandem.config import SchedulerConfig
from tandem.engine.prefill_order import PrefillOrder
from tandem.sim.cost_model import CostModel
from tandem.sim.events import EventLoop
from tandem.sim.kv_tiers import BlockTier
from tandem.sim.prefix_cache import PrefixCache
from tandem.sim.request import SimRequest
from tandem.types import RequestContext


@dataclass(eq=False)
class Job:
    """One request's work on one worker. `arrival_time` and `context` are what PrefillOrder reads."""

    job_id: str
    req: SimRequest
    kind: str                      # whole | prefill | decode
    outputs: int                   # tokens this worker generates in total (counting a pulled first token)
    arrival_time: float
    context: RequestContext
    on_first: Callable[["Job", float], None]
    on_token: Callable[["Job", float], None]
    on_done: Callable[["Job", float], None]
    pull_from: "tuple[SimWorker, str] | None" = None   # decode: (prefill worker, its pinned job id)
    computed: int = 0              # prompt tokens computed, hit or loaded
    generated: int = 0
    hit_tokens: int = 0
    tier_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def prompt(self) -> int:
        return self.req.prompt_tokens

    @property
    def in_prefill(self) -> bool:
        return self.computed < self.prompt


class SimWorker:
    def __init__(self, url: str, role: str, loop: EventLoop, cost: CostModel, sched: SchedulerConfig,
                 order: PrefillOrder, block_size: int, capacity_blocks: int,
                 host: BlockTier | None = None, store: BlockTier | None = None,
                 on_stored: Callable[[str, list[int]], None] | None = None,
                 on_removed: Callable[[str, list[int]], None] | None = None) -> None:
        self.url = url
        self.role: str | None = role
        self.healthy = True
        self.draining = False
        self.loop, self.cost, self.sched, self.order = loop, cost, sched, order
        self._block_size = block_size
        self.cache = PrefixCache(capacity_blocks,
                                 (lambda hs: on_stored(url, hs)) if on_stored else None,
                                 (lambda hs: on_removed(url, hs)) if on_removed else None)
        self.host, self.store = host, store
        self.waiting: list[Job] = []
        self.loading: list[Job] = []
        self.running: list[Job] = []
        self.pinned: dict[str, Job] = {}    # prefill jobs whose KV waits for a pull
        self._released_early: set[str] = set()   # released from inside on_first, before pinning
        self.busy = False
        self._unsorted = False   # a job joined the waiting queue since it was last sorted
        self.steps = 0
        self.busy_time = 0.0

    # --- WorkerState ---------------------------------------------------------------------
    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def hash_seed(self) -> int:
        return 0

    @property
    def stats(self) -> dict:
        return {"num_running": len(self.running) + len(self.loading), "num_waiting": len(self.waiting),
                "kv_cache_usage": self.cache.usage()}

    def idle(self) -> bool:
        return not (self.waiting or self.loading or self.running or self.pinned or self.busy)

    # --- work in ---------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        self.waiting.append(job)
        self._unsorted = True
        self._kick()

    def release_pinned(self, job_id: str) -> None:
        """The decode worker has pulled a prefill job's KV: its blocks go back to the cache."""
        job = self.pinned.pop(job_id, None)
        if job is None:   # the gateway answered from the first token, before the job was pinned
            self._released_early.add(job_id)
            return
        self.cache.release(job.job_id)
        self._kick()

    def restart(self, role: str) -> None:
        """A role switch restarts the process: a new role and an empty cache (it must be idle)."""
        assert self.idle(), "a worker restarts only once drained"
        self.cache.clear()
        self.role = role

    def _kick(self) -> None:
        if not self.busy and (self.waiting or self.running):
            self.busy = True
            self.loop.after(0.0, self._step)

    # --- the step --------------------------------------------------------------------------
    def _step(self) -> None:
        cfg = self.sched
        budget = cfg.max_num_batched_tokens
        plan: list[tuple[Job, int]] = []
        for job in self.running:
            if not job.in_prefill and budget > 0:
                plan.append((job, 1))
                budget -= 1
        self._admit()
        cap = cfg.long_prefill_token_threshold if cfg.long_prefill_token_threshold and self.waiting \
            else cfg.max_num_batched_tokens
        prefills = sorted((j for j in self.running if j.in_prefill),
                          key=lambda j: self.order.key(j, j.prompt - j.computed))
        for job in prefills:
            if budget <= 0:
                break
            n = min(job.prompt - job.computed, budget, cap)
            plan.append((job, n))
            budget -= n
        if not plan:
            self.busy = False
            return
        seqs = [(n, j.computed if j.in_prefill else j.prompt + j.generated - 1) for j, n in plan]
        sampled = sum(1 for j, n in plan if not j.in_prefill or j.computed + n >= j.prompt)
        dt = self.cost.step_time(seqs, sampled)
        self.steps += 1
        self.busy_time += dt
        self.loop.after(dt, lambda: self._step_done(plan))

    def _admit(self) -> None:
        bs = self._block_size
        # sorted only when a job joined (as the engine's scheduler does): aging moves every key alike
        if self._unsorted and len(self.waiting) > 1 and self.sched.long_prefill_token_threshold:
            self._unsorted = False
            self.waiting.sort(key=lambda j: self.order.key(j, self._waiting_work(j)))
        in_flight = {h for j in self.running if j.in_prefill and j.kind != "decode"
                     for h in j.req.full_blocks(bs)}
        deferred: list[Job] = []
        try:
            self._admit_from(in_flight, deferred)
        finally:
            self.waiting[:0] = deferred   # back at the front, in their order

    def _admit_from(self, in_flight: set[int], deferred: list[Job]) -> None:
        """Admit waiting jobs while slots and blocks last. A prompt whose first uncached block is
        one a running prefill computes waits for it (`deferred`), as the engine's scheduler does
        (Scheduler._continues_in_flight): it hits it once published instead of computing it twice."""
        cfg, bs = self.sched, self._block_size
        while self.waiting and len(self.running) + len(self.loading) < cfg.max_num_seqs:
            job = self.waiting[0]
            hashes = job.req.full_blocks(bs)
            hit = self.cache.match(hashes)
            if job.kind != "decode" and hit < len(hashes) and hashes[hit] in in_flight:
                deferred.append(self.waiting.pop(0))
                continue
            total_blocks = -(-(job.prompt + job.outputs) // bs)
            if total_blocks > self.cache.capacity:
                self.waiting.pop(0)   # can never fit: an explicit error, as the engine's context_length_exceeded
                job.req.rejected = "context larger than the worker's KV cache"
                job.on_done(job, self.loop.now)
                continue
            if not self.cache.allocate(job.job_id, hashes[:hit], total_blocks - hit):
                return
            self.waiting.pop(0)
            if job.kind == "decode":   # pull the prompt's KV past the local hit from the prefill worker
                pull = max(0, job.prompt - hit * bs)
                self._load(job, self.cost.handoff_time(pull), job.prompt, hit * bs, {})
                continue
            hit_tokens = min(hit * bs, job.prompt - 1)
            tiers: dict[str, int] = {}
            extra, delay = 0, 0.0
            for tier, load_time in ((self.host, self.cost.host_load_time),
                                    (self.store, self.cost.store_load_time)):
                if tier is None:
                    continue
                run = tier.match(hashes)
                more = min(run * bs, job.prompt - 1) - hit_tokens
                if more > extra:
                    extra, delay, tiers = more, load_time(more), {tier.name: more}
            if extra > 0:
                self._load(job, delay, hit_tokens + extra, hit_tokens, tiers)
            else:
                job.computed, job.hit_tokens = hit_tokens, hit_tokens
                self.running.append(job)
                in_flight.update(hashes[hit:])

    def _waiting_work(self, job: Job) -> int:
        if job.kind == "decode":
            return 1
        return job.prompt - self.cache.match(job.req.full_blocks(self._block_size)) * self._block_size

    def _load(self, job: Job, delay: float, computed: int, hit_tokens: int, tiers: dict[str, int]) -> None:
        job.hit_tokens, job.tier_tokens = hit_tokens, tiers
        self.loading.append(job)

        def ready() -> None:
            self.loading.remove(job)
            job.computed = computed
            if job.kind == "decode":
                job.generated = 1          # the first token came from the prefill worker
                if job.pull_from is not None:
                    source, pinned_id = job.pull_from
                    source.release_pinned(pinned_id)
                self.cache.publish(job.job_id, job.req.full_blocks(self._block_size))
                if job.generated >= job.outputs:
                    self._finish(job)
                    return
            self.running.append(job)
            self._kick()
        self.loop.after(delay, ready)

    def _step_done(self, plan: list[tuple[Job, int]]) -> None:
        now = self.loop.now
        for job, n in plan:
            if job.in_prefill:
                job.computed += n
                if job.in_prefill:
                    continue
                hashes = job.req.full_blocks(self._block_size)
                self.cache.publish(job.job_id, hashes)
                for tier in (self.host, self.store):
                    if tier is not None:
                        tier.write(hashes)
                job.generated = 1
                job.on_first(job, now)
            else:
                job.generated += 1
                job.on_token(job, now)
            if job.generated >= job.outputs:
                self._finish(job)
        self.busy = False
        self._kick()

    def _finish(self, job: Job) -> None:
        if job in self.running:
            self.running.remove(job)
        if job.kind != "prefill" and job.req.output_hashes and job.req.rejected is None:
            # the answer's KV, computed here while decoding, is cached and written through
            hashes = list(job.req.full_blocks(self._block_size)) + list(job.req.output_hashes)
            self.cache.publish(job.job_id, hashes)
            for tier in (self.host, self.store):
                if tier is not None:
                    tier.write(hashes)
        self._kick()
        if job.kind == "prefill" and job.job_id not in self._released_early:
            self.pinned[job.job_id] = job   # blocks stay until the decode side pulls them
        elif job.kind == "prefill":
            self._released_early.discard(job.job_id)
            self.cache.release(job.job_id)
        else:
            self.cache.release(job.job_id)
        job.on_done(job, self.loop.now)
