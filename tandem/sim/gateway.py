"""The simulated gateway: the real Router, placement policy and load tracker over simulated workers.

Per request it does what tandem/gateway/pd_flow.py does, with events in place of HTTP:
- `Router.mode()`: "pd" when both disaggregated pools are live, else whole requests on "both"
  (or on the pool that is left while the other has no healthy worker);
- whole requests: `Router.choose(pool)`, `LoadTracker.dispatch` with the uncached tokens,
  `prefill_done` at the first token, `tokens` per token, `finish` at the end;
- disaggregated: the decode worker (among the decode and the both workers) and the prefill worker
  the router would pick (`commit=False`); a both worker serves the request whole, else `place()`
  (tandem/router/policies/placement.py) decides remote or local; remote: the prefill
  worker computes the prompt and the first token, the decode worker is chosen again at that
  moment and pulls the KV (its time from the cost model's interconnect), then decodes.
- 503/429 from admission (NoHealthyWorker, CapacityExceeded): the client retries after
  `retry_s`, at most `max_retries` times, then the request ends with an explicit error.
The prefix index is fed directly from the workers' caches and the shared store (no polling lag).
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.errors import CapacityExceeded, NoHealthyWorker
from tandem.router.load_tracker import LoadTracker
from tandem.router.policies.placement import Placement, PlacementConfig, place
from tandem.router.router import Route, Router
from tandem.sim.events import EventLoop
from tandem.sim.metrics import Metrics
from tandem.sim.registry import SimRegistry
from tandem.sim.request import SimRequest
from tandem.sim.worker import Job, SimWorker
from tandem.types import RequestContext


class TraceTokens:
    """A prompt as `Router.choose` reads it (tandem.router.router.HashMemo's shape): its length
    and its full blocks' hashes, which for a trace are the trace's hash ids."""

    def __init__(self, req: SimRequest, block_size: int) -> None:
        self.token_ids = range(req.prompt_tokens)
        self.block_size = block_size
        self._hashes = list(req.full_blocks(block_size))

    def get(self, block_size: int, seed: int) -> list[int]:
        if block_size != self.block_size:
            raise ValueError(f"trace blocks are {self.block_size} tokens, the worker's {block_size}")
        return self._hashes


@dataclass(frozen=True)
class GatewayConfig:
    placement: PlacementConfig = PlacementConfig()
    affinity: bool = True          # send the session id (x-session-affinity)
    retry_s: float = 0.5
    max_retries: int = 120


class SimGateway:
    def __init__(self, loop: EventLoop, router: Router, tracker: LoadTracker, registry: SimRegistry,
                 metrics: Metrics, config: GatewayConfig, block_size: int) -> None:
        self.loop, self.router, self.tracker = loop, router, tracker
        self.registry, self.metrics, self.config = registry, metrics, config
        self.block_size = block_size

    def arrive(self, req: SimRequest, attempt: int = 0) -> None:
        if attempt == 0:
            self.metrics.outstanding += 1
        memo = TraceTokens(req, self.block_size)
        session = req.session_id if self.config.affinity else None
        try:
            mode = self.router.mode()
            if mode == "pd":
                self._pd(req, memo, session)
            else:
                pool = "both" if mode == "colocated" else mode
                self._whole(req, self.router.choose(pool, memo, session), "colocated" if pool == "both" else "local")
        except (NoHealthyWorker, CapacityExceeded) as exc:
            if attempt >= self.config.max_retries:
                req.rejected = f"{type(exc).__name__}: {exc}"
                self.metrics.done(req, self.loop.now)
                return
            self.metrics.retries += 1
            self.loop.after(self.config.retry_s, lambda: self.arrive(req, attempt + 1))

    def _context(self, session: str | None) -> RequestContext:
        return RequestContext(session_id=session)

    def _whole(self, req: SimRequest, route: Route, label: str) -> None:
        worker: SimWorker = route.worker   # type: ignore[assignment]
        jid = f"{req.request_id}-w"
        self.tracker.dispatch(jid, worker.url, pending=route.uncached_tokens)
        req.route = label

        def first(job: Job, t: float) -> None:
            self._note_cache(req, job)
            self.tracker.prefill_done(jid, worker.url, req.prompt_tokens + 1)
            self.tracker.tokens(jid, worker.url, 1)
            self.metrics.first(req, t)

        def token(job: Job, t: float) -> None:
            self.tracker.tokens(jid, worker.url, 1)
            self.metrics.token(req, t)

        def done(job: Job, t: float) -> None:
            self.tracker.finish(jid, worker.url)
            self.metrics.done(req, t)

        worker.submit(Job(jid, req, "whole", req.output_tokens, self.loop.now,
                          self._context(req.session_id), first, token, done))

    def _pd(self, req: SimRequest, memo: TraceTokens, session: str | None) -> None:
        router = self.router
        decode = router.choose("decode", memo, session, commit=False, also=("both",))
        prefill: Route | None = None
        if decode.worker.role == "both":      # the planner's half-way role: whole requests there
            where = Placement(local=True, reason="both")
        else:
            try:
                prefill = router.choose("prefill", memo, session, commit=False)
            except (NoHealthyWorker, CapacityExceeded):
                pass
            where = place(prefill.load if prefill else None, decode.load, decode.request, self.config.placement)
        self.metrics.placements[where.reason] += 1
        if where.local:
            router.commit("decode", decode)
            self._whole(req, decode, "local")
            return
        assert prefill is not None
        router.commit("prefill", prefill)
        pworker: SimWorker = prefill.worker   # type: ignore[assignment]
        pid = f"{req.request_id}-p"
        self.tracker.dispatch(pid, pworker.url, pending=prefill.uncached_tokens)
        req.route = "remote"

        def first(job: Job, t: float) -> None:
            self._note_cache(req, job)
            self.tracker.finish(pid, pworker.url)
            self.metrics.first(req, t)
            if req.output_tokens <= 1:
                pworker.release_pinned(pid)
                self.metrics.done(req, t)
                return
            self._decode(req, memo, session, pworker, pid)

        pworker.submit(Job(pid, req, "prefill", 1, self.loop.now, self._context(req.session_id),
                           first, lambda j, t: None, lambda j, t: None))

    def _decode(self, req: SimRequest, memo: TraceTokens, session: str | None, pworker: SimWorker,
                pid: str, attempt: int = 0) -> None:
        try:
            route = self.router.choose("decode", memo, session)
        except (NoHealthyWorker, CapacityExceeded):
            if attempt >= self.config.max_retries:   # the KV is dropped, the request fails
                pworker.release_pinned(pid)
                req.rejected = "no decode worker took it"
                self.metrics.done(req, self.loop.now)
                return
            self.metrics.retries += 1
            self.loop.after(self.config.retry_s,
                            lambda: self._decode(req, memo, session, pworker, pid, attempt + 1))
            return
        dworker: SimWorker = route.worker   # type: ignore[assignment]
        did = f"{req.request_id}-d"
        self.tracker.dispatch(did, dworker.url, pending=0, context=req.prompt_tokens + 1)

        def token(job: Job, t: float) -> None:
            self.tracker.tokens(did, dworker.url, 1)
            self.metrics.token(req, t)

        def done(job: Job, t: float) -> None:
            self.tracker.finish(did, dworker.url)
            if req.rejected is not None:
                pworker.release_pinned(pid)
            self.metrics.done(req, t)

        dworker.submit(Job(did, req, "decode", req.output_tokens, self.loop.now, self._context(req.session_id),
                           lambda j, t: None, token, done, pull_from=(pworker, pid)))

    @staticmethod
    def _note_cache(req: SimRequest, job: Job) -> None:
        req.cached_by_tier = {"device": job.hit_tokens, **job.tier_tokens}
        req.cached_tokens = job.hit_tokens + sum(job.tier_tokens.values())
