"""The gateway's Backend: each engine request becomes one or more passes over remote workers.

A pass is either
- colocated: one call to a role=both worker, or
- disaggregated: a prefill call (prefill_only=True) that returns the first token and a KV
  handle, then a decode call (kv_handle, resume_output_ids) that streams the rest. The first
  token is yielded as the stream's first delta (stitched in), before the decode call starts;
- local prefill (disaggregated mode): the router looks at the decode and the prefill worker it
  would pick, and the placement policy (tandem/router/policies/placement.py: conditional
  disaggregation, on by default) decides whether the decode worker serves the whole request, as
  a colocated worker would (no prefill queue, no handoff, its prefill chunks in the decode
  worker's steps): when the prefill queue would make the request wait longer than the decode
  worker's streams would stall, when the remainder is at most GatewayConfig.local_prefill_tokens,
  or when no prefill worker is available;
- whole requests on a role=both worker of a disaggregated fleet (one the planner moved half-way
  between the pools, tandem/planner/policy.py): the decode worker is chosen among the decode and
  the both workers, and a both worker serves the whole request (placement reason "both"); it
  never takes part in a handoff, so it needs no KV transport;
- whole requests on one disaggregated pool: while the other pool has no live worker, the
  surviving pool's workers serve whole requests (Router.mode()).

The client sees one stream. `sent` is every token id already yielded to it; its text was yielded
too. If a pass fails (`WorkerFailed`), the next pass re-runs the prompt with
`resume_output_ids=sent` on other workers: before the first token that is a retry, after it a
migration. The worker replays its detokenizer over the resumed tokens without emitting them, so
under greedy decoding the client's stream continues token for token as if nothing happened.

Usage is merged: prompt and cached tokens from the first pass that reported them, completion
tokens = tokens yielded. Response headers x-tandem-prefill / x-tandem-decode name the first
pass's workers (set before the first delta, as ResponseInfo requires).
Invariant: every dispatch to a worker is matched by a `tracker.finish` (in `finally`), so the
load estimate returns to zero when the gateway is idle.
Invariant: a pass routes and calls `tracker.dispatch` before its first await, so a request the
admission gate releases (tandem/gateway/admission/gate.py) is counted in the same loop step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace

from tandem.api.backend import ResponseInfo
from tandem.errors import CapacityExceeded, NoHealthyWorker, TandemError
from tandem.gateway.admission.gate import AdmissionGate
from tandem.gateway.config import GatewayConfig
from tandem.gateway.conversation import session_key
from tandem.gateway.metrics import GatewayMetrics
from tandem.gateway.readiness import Readiness, readiness
from tandem.gateway.registry import Registry
from tandem.gateway.upstream_trace import traced_generate
from tandem.gateway.worker_client import WorkerFailed, WorkerHTTP, release_kv
from tandem.kv.block_hash import cache_keys
from tandem.kv.retention import TurnEnd, turn_end
from tandem.router.load_tracker import LoadTracker
from tandem.router.policies.placement import Placement, PlacementConfig, place
from tandem.router.router import HashMemo, Route, Router
from tandem.tracing.tracer import NoopTracer, Tracer
from tandem.types import EngineRequest, EngineStats, FinishReason, RequestDelta, RequestTimings

log = logging.getLogger(__name__)

HEADER_PREFILL = "x-tandem-prefill"
HEADER_DECODE = "x-tandem-decode"


@dataclass
class GatewayParts:
    """What the backend drives; built once by the app."""

    config: GatewayConfig
    registry: Registry
    router: Router
    tracker: LoadTracker
    http: WorkerHTTP                         # calls to workers' /internal/generate and kv_release
    metrics: GatewayMetrics | None
    forget_worker: Callable[[str], None]     # a dead worker: drop its index entries and load
                                             # offset, abort its connections (other calls fail now)
    background: set = field(default_factory=set)  # fire-and-forget calls still running
    # the chat template's assistant header: conversations without x-session-affinity are
    # recognised by the prompt up to its first occurrence (tandem/gateway/conversation.py)
    marker: tuple[int, ...] | None = None
    # each call to a worker is a span, child of the request's (tandem/gateway/upstream_trace.py)
    tracer: Tracer = field(default_factory=NoopTracer)
    gate: AdmissionGate | None = None   # flow control over saturated workers; None: off


class GatewayBackend:
    """`tandem.api.backend.Backend` over remote workers."""

    def __init__(self, parts: GatewayParts, tokenizer, model_name: str, max_model_len: int) -> None:
        self.parts = parts
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.model_max_len = max_model_len  # the model's own context (config.json)

    @property
    def max_model_len(self) -> int:
        """The context every healthy worker can serve: the smallest they report (a worker may
        run with a shorter --max-model-len), the model's own before any has reported."""
        reported = [w.stats.get("max_model_len") for w in self.parts.registry.all() if w.healthy]
        return min((n for n in reported if isinstance(n, int) and n > 0), default=self.model_max_len)

    def generate(self, req: EngineRequest, info: ResponseInfo | None = None
                 ) -> AsyncIterator[RequestDelta]:
        flow = _Flow(self.parts, req, info).run()
        return flow if self.parts.gate is None else self.parts.gate.gated(req, flow)

    def ready(self) -> bool:
        """A request can be served now: a pd pair, a colocated worker, or one disaggregated pool
        serving whole requests while the other has no healthy worker (tandem/gateway/readiness.py)."""
        return self.readiness().ready

    def health_detail(self) -> dict:
        return self.readiness().body()

    def readiness(self) -> Readiness:
        return readiness(self.parts.registry, self.parts.router.mode)

    def abort(self, request_id: str) -> None:
        """Nothing to do: closing the stream returned by `generate` closes the worker calls,
        which aborts the requests there."""

    def stats(self) -> EngineStats:
        """Sums over the healthy workers' last reports."""
        keys = EngineStats.__dataclass_fields__
        total: dict = dict.fromkeys(keys, 0)
        live = [w for w in self.parts.registry.all() if w.healthy]
        for w in live:
            for k in keys:
                v = w.stats.get(k, 0)
                if isinstance(v, list):   # counts by position: summed position by position
                    acc = list(total[k] or ())
                    acc += [0] * (len(v) - len(acc))
                    for i, n in enumerate(v):
                        acc[i] += n
                    total[k] = tuple(acc)
                elif isinstance(v, (int, float)):
                    total[k] += v
        total["kv_cache_usage"] = total["kv_cache_usage"] / len(live) if live else 0.0
        for k in ("spec_accepted_per_pos", "kv_tier_stats", "kv_handoff_stats",
                  "turn_gap_counts"):   # none: (), not 0
            total[k] = total[k] or ()
        total["kv_tier_weights"] = ()   # each worker's own: a sum means nothing
        return EngineStats(**total)


class _Flow:
    """One engine request's life at the gateway."""

    def __init__(self, parts: GatewayParts, req: EngineRequest, info: ResponseInfo | None) -> None:
        self.p = parts
        self.req = req
        self.info = info
        # the session key for the routing policy: x-session-affinity, else the fingerprint
        self.session = session_key(req.prompt_token_ids, parts.marker, req.context)
        # the agent's hint says no turn follows: placed as its session, which then leaves the table
        self.session_ends = req.context.agent.expect_next_turn_s == 0
        # the output text, kept only where it can say the turn ended the session's task (tools offered)
        self.text: list[str] | None = \
            [] if self.session is not None and req.context.agent.tool_call_markers else None
        # every output token the client has, a queued job's saved progress first (the engine
        # counts those toward max_tokens and does not emit them again); `resumed` of them came in
        self.sent: list[int] = list(req.resume_output_ids)
        self.resumed = len(self.sent)
        self.cached: int | None = None       # prompt tokens the first serving worker had cached
        self.exclude: set[str] = set()       # workers that failed this request
        self.passes = 0
        self.retries = 0
        self.migrations = 0
        self.headers_set = False
        self.first_scheduled: float | None = None
        self.first_token: float | None = None

    # --- the loop over passes -------------------------------------------------------------
    async def run(self) -> AsyncIterator[RequestDelta]:
        cfg = self.p.config
        while True:
            try:
                mode = self.p.router.mode()
                one_pass = self._pd_pass() if mode == "pd" else \
                    self._colocated_pass("both" if mode == "colocated" else mode)
                async with aclosing(one_pass) as deltas:
                    async for d in deltas:
                        yield d
                return
            except WorkerFailed as exc:
                self._note_failure(exc)
                if self._streamed():
                    self.migrations += 1
                    if self.migrations > cfg.max_migrations:
                        yield self._error(f"gave up after {self.migrations} migrations: {exc}")
                        return
                    log.warning("request %s: %s; migrating after %d tokens",
                                self.req.request_id, exc, len(self.sent))
                    if self.p.metrics:
                        self.p.metrics.migrations.inc()
                else:
                    self.retries += 1
                    if self.retries >= cfg.max_prefill_attempts:
                        raise NoHealthyWorker(f"no worker could serve the request after "
                                              f"{self.retries} attempts; last: {exc}") from exc
                    log.warning("request %s: %s; retrying elsewhere", self.req.request_id, exc)
                    if self.p.metrics:
                        self.p.metrics.retries.labels(exc.pool).inc()
            except TandemError as exc:
                if not self._streamed():
                    raise
                yield self._error(exc.message)  # e.g. no worker left to migrate to
                return

    def _streamed(self) -> bool:
        """Whether this flow has produced a token (a failure now is a migration, not a retry)."""
        return len(self.sent) > self.resumed

    def _note_failure(self, exc: WorkerFailed) -> None:
        if exc.hard and self.p.registry.mark_dead(exc.url):
            log.warning("worker %s marked unhealthy: %s", exc.url, exc)
            self.p.forget_worker(exc.url)
        self.exclude.add(exc.url)
        if exc.also_exclude is not None:
            self.exclude.add(exc.also_exclude)

    # --- passes ---------------------------------------------------------------------------
    def _worker_request(self, suffix: str, **kw) -> EngineRequest:
        r = self.req
        # the worker keys KV retention by the session (x-session-affinity, else the fingerprint,
        # which already holds the tenant; the worker scopes either by the KV partition)
        context = r.context if self.session == r.context.session_id else \
            replace(r.context, session_id=self.session)
        return EngineRequest(request_id=f"{r.request_id}-{suffix}{self.passes}",
                             prompt_token_ids=r.prompt_token_ids, sampling=r.sampling,
                             context=context, arrival_time=r.arrival_time,
                             resume_output_ids=list(self.sent), **kw)

    def _choose(self, pool: str, memo: HashMemo, exclude: frozenset[str], commit: bool = True,
                also: tuple[str, ...] = ()) -> Route:
        """The router's choice in `pool` for this request: its session, priority and tenant."""
        ctx = self.req.context
        return self.p.router.choose(pool, memo, self.session, exclude, commit=commit, also=also,
                                    session_ends=self.session_ends, priority=ctx.priority,
                                    tenant=ctx.tenant)

    async def _colocated_pass(self, pool: str) -> AsyncIterator[RequestDelta]:
        """Whole requests on `pool`: "both", or a disaggregated pool while the other is down."""
        self.passes += 1
        memo = HashMemo(self.req.prompt_token_ids + self.sent, cache_keys(self.req.context))
        route = self._choose(pool, memo, frozenset(self.exclude))
        async with aclosing(self._whole_pass(route, pool)) as deltas:
            async for d in deltas:
                yield d

    async def _whole_pass(self, route: Route, pool: str) -> AsyncIterator[RequestDelta]:
        """Prompt and every output token from one worker."""
        url = route.worker.url
        wreq = self._worker_request("c" if pool == "both" else "l")
        tracker = self.p.tracker
        tracker.dispatch(wreq.request_id, url, pending=route.uncached_tokens,
                          priority=wreq.context.priority,
                         tenant=wreq.context.tenant)
        dispatched = time.monotonic()
        first = True
        try:
            async with aclosing(self._stream(url, wreq, pool)) as deltas:
                async for d in deltas:
                    if first and (d.new_token_ids or d.finished):
                        first = False
                        self._set_headers(url, url)  # it answered: name it, not a failed attempt
                        self._note_prompt(d)
                        tracker.prefill_done(wreq.request_id, url,
                                             len(wreq.prompt_token_ids) + len(self.sent))
                    tracker.tokens(wreq.request_id, url, len(d.new_token_ids))
                    self._note_timings(d, dispatched)
                    yield self._rewrite(d)
        finally:
            tracker.finish(wreq.request_id, url)

    async def _pd_pass(self) -> AsyncIterator[RequestDelta]:
        self.passes += 1
        memo = HashMemo(self.req.prompt_token_ids + self.sent, cache_keys(self.req.context))
        exclude = frozenset(self.exclude)
        router = self.p.router
        # where to prefill: look at the decode and the prefill worker the router would pick
        decode: Route | None = self._choose("decode", memo, exclude, commit=False, also=("both",))
        prefill: Route | None = None
        if decode.worker.role == "both":
            where = Placement(local=True, reason="both")
        else:
            try:
                prefill = self._choose("prefill", memo, exclude, commit=False)
            except (NoHealthyWorker, CapacityExceeded):
                pass   # the decode worker serves it whole
            where = place(prefill.load if prefill else None, decode.load, decode.request,
                          placement_config(self.p.config))
        if self.p.metrics:
            self.p.metrics.on_placement(where)
        if where.local:
            router.commit("decode", decode)
            pool = "both" if decode.worker.role == "both" else "decode"
            async with aclosing(self._whole_pass(decode, pool)) as deltas:
                async for d in deltas:
                    yield d
            return
        router.commit("prefill", prefill)
        decode = None   # chosen again once the prefill is done, on the load of that moment
        p_url = prefill.worker.url
        preq = self._worker_request("p", prefill_only=True)
        tracker = self.p.tracker
        tracker.dispatch(preq.request_id, p_url, pending=prefill.uncached_tokens,
                         priority=preq.context.priority,
                         tenant=preq.context.tenant)
        dispatched = time.monotonic()
        try:
            first = await self._prefill(p_url, preq)
        finally:
            tracker.finish(preq.request_id, p_url)
        self._note_prompt(first)
        self._note_timings(first, dispatched)
        if first.kv_handle is None:  # finished at its first token (EOS, stop, max_tokens=1)
            self._set_headers(p_url, p_url)
            yield self._rewrite(first)
            return
        got_token = False
        try:
            if decode is None:
                decode = self._choose("decode", memo, exclude)
            d_url = decode.worker.url
            self._set_headers(p_url, d_url)
            yield self._rewrite(first, finished=False)
            async with aclosing(self._decode(d_url, first, p_url)) as deltas:
                async for d in deltas:
                    got_token = got_token or bool(d.new_token_ids)
                    yield d
        finally:
            if not got_token:  # the decode worker may never have seen the handle
                self._release_later(p_url, first.kv_handle.request_id)

    def _release_later(self, url: str, request_id: str) -> None:
        task = asyncio.get_running_loop().create_task(release_kv(self.p.http, url, request_id))
        self.p.background.add(task)
        task.add_done_callback(self.p.background.discard)

    async def _decode(self, d_url: str, first: RequestDelta, p_url: str) -> AsyncIterator[RequestDelta]:
        dreq = self._worker_request("d", kv_handle=first.kv_handle)
        tracker = self.p.tracker
        tracker.dispatch(dreq.request_id, d_url, pending=0,
                         context=len(dreq.prompt_token_ids) + len(self.sent), priority=dreq.context.priority,
                         tenant=dreq.context.tenant)
        got_token = False
        try:
            async with aclosing(self._stream(d_url, dreq, "decode")) as deltas:
                async for d in deltas:
                    got_token = got_token or bool(d.new_token_ids)
                    tracker.tokens(dreq.request_id, d_url, len(d.new_token_ids))
                    yield self._rewrite(d)
        except WorkerFailed as exc:
            if exc.hard or got_token:
                raise
            # failed softly before any token: most likely it could not pull the KV (its
            # prefill worker died), so the retry avoids that prefill worker too
            raise WorkerFailed(exc.url, exc.message, exc.hard, exc.pool, also_exclude=p_url) from exc
        finally:
            tracker.finish(dreq.request_id, d_url)

    async def _prefill(self, url: str, preq: EngineRequest) -> RequestDelta:
        """The prefill call's deltas merged into one (normally it sends exactly one, final)."""
        tokens: list[int] = []
        text: list[str] = []
        logprobs: list = []
        prompt_logprobs = None
        async with aclosing(self._stream(url, preq, "prefill")) as deltas:
            async for d in deltas:
                tokens += d.new_token_ids
                text.append(d.new_text)
                logprobs += d.logprobs or []
                prompt_logprobs = d.prompt_logprobs if d.prompt_logprobs is not None else prompt_logprobs
                if d.finished:
                    return RequestDelta(
                        request_id=d.request_id, new_token_ids=tokens, new_text="".join(text),
                        finished=True, finish_reason=d.finish_reason,
                        logprobs=logprobs if d.logprobs is not None else None,
                        prompt_logprobs=prompt_logprobs,
                        num_prompt_tokens=d.num_prompt_tokens, num_cached_tokens=d.num_cached_tokens,
                        num_output_tokens=d.num_output_tokens, kv_handle=d.kv_handle,
                        timings=d.timings)
        raise WorkerFailed(url, "prefill ended without a final delta", False, "prefill")

    def _stream(self, url: str, wreq: EngineRequest, pool: str) -> AsyncIterator[RequestDelta]:
        return traced_generate(self.p.tracer, self.req.context.trace, self.p.http, url, wreq, pool,
                               self.p.config.worker_read_timeout_s)

    # --- rewriting --------------------------------------------------------------------------
    def _set_headers(self, prefill_url: str, decode_url: str) -> None:
        if self.headers_set or self.info is None:
            return
        self.headers_set = True
        self.info.set_header(HEADER_PREFILL, prefill_url)
        self.info.set_header(HEADER_DECODE, decode_url)

    def _note_prompt(self, d: RequestDelta) -> None:
        if self.cached is None:
            self.cached = d.num_cached_tokens
            if self.p.metrics:
                self.p.metrics.on_prompt(len(self.req.prompt_token_ids), d.num_cached_tokens)

    def _note_timings(self, d: RequestDelta, dispatched: float) -> None:
        t = d.timings
        if self.first_scheduled is None and t is not None and t.first_scheduled is not None:
            # the worker's queue time, moved onto the gateway's clock
            self.first_scheduled = dispatched + max(0.0, t.first_scheduled - t.arrival)

    def _rewrite(self, d: RequestDelta, finished: bool | None = None) -> RequestDelta:
        """A worker's delta as the client's stream: the client's id, merged usage."""
        now = time.monotonic()
        if d.new_token_ids and self.first_token is None:
            self.first_token = now
        self.sent.extend(d.new_token_ids)
        fin = d.finished if finished is None else finished
        if self.text is not None:
            self.text.append(d.new_text)
            if fin:
                self._end_turn(d.finish_reason)
        timings = RequestTimings(self.req.arrival_time, self.first_scheduled, self.first_token,
                                 now) if fin else None
        return RequestDelta(
            request_id=self.req.request_id, new_token_ids=list(d.new_token_ids),
            new_text=d.new_text, finished=fin, finish_reason=d.finish_reason if fin else None,
            logprobs=d.logprobs, prompt_logprobs=d.prompt_logprobs,
            num_prompt_tokens=len(self.req.prompt_token_ids),
            num_cached_tokens=self.cached or 0, num_output_tokens=len(self.sent),
            timings=timings, error=d.error if fin else None)

    def _end_turn(self, reason: FinishReason | None) -> None:
        """A turn that ends as an agent's task ends (the worker's rule for its KV) leaves its
        session resting: it keeps its home but no longer counts against its worker."""
        if turn_end(reason, "".join(self.text or ()), self.req.context.agent, True) is TurnEnd.ENDED:
            self.p.router.sessions.rest(self.session)

    def _error(self, message: str) -> RequestDelta:
        return RequestDelta(
            request_id=self.req.request_id, new_token_ids=[], new_text="", finished=True,
            finish_reason=FinishReason.ERROR, num_prompt_tokens=len(self.req.prompt_token_ids),
            num_cached_tokens=self.cached or 0, num_output_tokens=len(self.sent),
            timings=RequestTimings(self.req.arrival_time, self.first_scheduled, self.first_token,
                                   time.monotonic()), error=message)


def placement_config(cfg: GatewayConfig) -> PlacementConfig:
    """The placement policy's settings; --local-prefill-tokens N is its always-local threshold."""
    p = cfg.placement
    if cfg.local_prefill_tokens <= p.always_local_tokens:
        return p
    return replace(p, always_local_tokens=cfg.local_prefill_tokens)
