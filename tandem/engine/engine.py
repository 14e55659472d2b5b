"""The synchronous engine: one `step()` = schedule, execute, update.

Not thread-safe: one thread owns it (the async front's engine thread, or a test).

KV that comes from or goes to another place (a prefill worker's blocks, a store) passes through
the KV connector (tandem/kv/connector.py): the scheduler asks its scheduler side at admission and
at finish; the engine starts the worker side's loads and saves each step and applies what it
reports. Draft tokens from a proposer (tandem/engine/proposer.py) ride the same step: scheduled
after a decode's last token, sampled by the runner at each position, accepted by the update.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from tandem.compute_threads import compute_alone
from tandem.config import EngineConfig
from tandem.engine.assembly import assemble
from tandem.engine.detokenizer import IncrementalDetokenizer
from tandem.engine.kv_placement import KVPlacement
from tandem.engine.proposer import Proposer
from tandem.engine.request import Request, RequestStatus
from tandem.engine.scheduler import Scheduler, SchedulerOutput
from tandem.errors import InvalidRequest, PromptTooLong
from tandem.grammar.compiler import GrammarCompiler
from tandem.grammar.masks import GrammarMasks
from tandem.grammar.masks import allocate as allocate_masks
from tandem.kv.connector import FinishedKV, KVConnector
from tandem.kv.events import KVEventLog
from tandem.kv.kv_cache_manager import KVCacheManager
from tandem.kv.retention import TurnEnd, turn_end
from tandem.kv.session_retention import SessionRetainer, session_key
from tandem.models.kv_layout import layout_of
from tandem.models.loader import LoadedModel
from tandem.tokenization.tokenizer import Tokenizer
from tandem.runner.model_runner import ModelRunner, StepResult
from tandem.runner.scheduled import SampledSeq, ScheduledSeq, accepted_length
from tandem.types import (EngineRequest, EngineStats, FinishReason, RequestDelta,
                          RequestTimings, TokenLogprob)

log = logging.getLogger(__name__)

# constrained rows up to which a step's grammar masks are filled on the engine thread
_INLINE_MASK_ROWS = 8


@dataclass
class SpecCounters:
    """Speculative decoding since start (vLLM's spec_decode counters)."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def count(self, num_proposed: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_proposed
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_pos) < num_proposed:
            self.accepted_per_pos.extend([0] * (num_proposed - len(self.accepted_per_pos)))
        for pos in range(num_accepted):
            self.accepted_per_pos[pos] += 1


class Engine:
    def __init__(self, config: EngineConfig, loaded: LoadedModel, tokenizer: Tokenizer,
                 kv_cache: torch.Tensor, connector: KVConnector | None = None,
                 proposer: Proposer | None = None, transport_address: str | None = None,
                 events: KVEventLog | None = None) -> None:
        """`kv_cache`: [num_blocks, *layout.block_shape]; `connector` moves KV between this worker
        and others (the handoff, a store); `transport_address` is where this worker's blocks are
        served, when they are; `events`: the log the KV cache reports to (a connector may report
        there too). Engine.from_config assembles all of them from the config."""
        self.config = config
        if config.seed is not None:   # requests without a seed sample from torch's global generator
            torch.manual_seed(config.seed)
        self.loaded = loaded
        self.tokenizer = tokenizer
        self.layout = layout_of(loaded, config.cache)
        self.max_model_len = loaded.max_model_len
        device = torch.device(config.model.device)
        self.num_blocks = kv_cache.shape[0]
        if self.num_blocks < 2:
            raise ValueError(f"the KV cache budget holds {self.num_blocks} blocks of "
                             f"{self.layout.block_nbytes} bytes; give it more memory")
        self.events = events if events is not None else KVEventLog()
        self.kv = KVCacheManager(self.num_blocks, config.cache.block_size,
                                 config.cache.enable_prefix_caching, config.cache.hash_seed, self.events)
        # KV kept for an agent's next turn across its tool calls (tandem/kv/retention.py)
        self.retention = SessionRetainer(self.kv.pool, config.retention)
        self._stalled = False   # the last step admitted and ran nothing (has_runnable)
        self.connector = connector
        self.scheduler = Scheduler(config.scheduler, self.kv, connector.scheduler if connector else None)
        self.runner = ModelRunner(loaded, self.layout, kv_cache, device)
        self.proposer = proposer
        self.transport_address = transport_address
        self.requests: dict[str, Request] = {}
        self.grammars = GrammarCompiler(tokenizer.backend, loaded.arch.vocab_size, loaded.eos_token_ids,
                                        config.grammar)
        self._mask_thread: ThreadPoolExecutor | None = None   # fills grammar masks during the forward
        self.num_prompt_tokens = 0      # cumulative, counted when a request's first token is sampled
        self.num_generation_tokens = 0  # cumulative
        self.spec = SpecCounters()

    @classmethod
    def from_config(cls, config: EngineConfig, loaded: LoadedModel | None = None,
                    kv: KVPlacement | None = None) -> "Engine":
        """The engine `config` describes, assembled by tandem/engine/assembly.py: the model
        (unless given: a parallel worker's rank 0 loads its shard), tokenizer, KV cache (where
        `kv` places it; default: as the config says), its connectors, the proposer."""
        p = assemble(config, loaded, kv)
        return cls(p.config, p.loaded, p.tokenizer, p.kv_cache, p.connector, p.proposer,
                   p.transport_address, p.events)

    # --- requests -----------------------------------------------------------------------
    def add_request(self, er: EngineRequest, compiled_grammar=None) -> None:
        """Admit a request to the queue, or raise a TandemError saying what to fix.
        `compiled_grammar`: er.sampling.grammar compiled already (the async front does, off this
        thread); None: compiled here if the request has a grammar."""
        self.validate(er)
        req = Request.from_engine_request(er)
        req.detokenizer = IncrementalDetokenizer(
            self.tokenizer.backend, req.prompt_token_ids, stop=er.sampling.stop,
            include_stop_str_in_output=er.sampling.include_stop_str_in_output,
            skip_special_tokens=er.sampling.skip_special_tokens,
            prefix_output_ids=list(er.resume_output_ids))
        if er.sampling.grammar is not None:   # the state replays resumed tokens
            req.grammar = self.grammars.matcher(er.sampling.grammar, er.resume_output_ids,
                                                compiled_grammar)
        self.requests[req.request_id] = req
        now = time.monotonic()
        self.retention.expire(now)
        self.retention.arrived(session_key(req.context), req.context.tenant, now)
        self.scheduler.add(req)

    def validate(self, er: EngineRequest) -> None:
        er.sampling.validate()
        if er.request_id in self.requests or er.request_id in self.scheduler.kept:
            raise InvalidRequest(f"request id {er.request_id!r} is already in use", param="request_id")
        n = len(er.prompt_token_ids)
        if n == 0:
            raise InvalidRequest("the prompt is empty", param="prompt")
        vocab = self.loaded.arch.vocab_size
        ids = er.prompt_token_ids
        bad = None
        if min(ids) < 0 or max(ids) >= vocab:  # two C passes; the culprit searched only then
            bad = next(t for t in ids if not 0 <= t < vocab)
        if bad is not None:
            raise InvalidRequest(f"token id {bad} is outside the vocabulary [0, {vocab})", param="prompt")
        bad = next((t for t, _ in er.sampling.logit_bias if t >= vocab), None)
        if bad is not None:
            raise InvalidRequest(f"logit_bias names token id {bad}, outside the vocabulary [0, {vocab})",
                                 param="logit_bias")
        total = n + len(er.resume_output_ids)
        if total >= self.max_model_len:
            raise PromptTooLong(f"This model's maximum context length is {self.max_model_len} "
                                f"tokens, and the prompt has {total} tokens, which leaves no room "
                                "to generate")
        needed = total // self.layout.block_size + 1
        if needed > self.num_blocks:
            raise PromptTooLong(f"the prompt has {total} tokens but the KV cache holds only "
                                f"{self.num_blocks * self.layout.block_size}")
        hands_over = self.connector is not None and self.connector.scheduler.hands_over
        for name, asked in (("kv_handle", er.kv_handle is not None), ("prefill_only", er.prefill_only)):
            if asked and not hands_over:
                raise InvalidRequest(f"this worker has no KV transport; it cannot serve {name}", param=name)
        if self.connector is not None:
            self.connector.scheduler.validate(er)

    def abort(self, request_id: str) -> RequestDelta | None:
        req = self.requests.get(request_id)
        if req is None or req.finished:
            return None
        if req.status is RequestStatus.WAITING_FOR_KV:
            req.finish_reason = FinishReason.ABORT  # finished when its load completes
            return None
        return self._finish(req, FinishReason.ABORT)

    def fail_all(self, message: str) -> list[RequestDelta]:
        """End every request with an error (after a failed step); frees their blocks."""
        deltas = []
        for req in list(self.requests.values()):
            if req.status is RequestStatus.WAITING_FOR_KV:
                req.finish_reason = FinishReason.ERROR  # ended when its load completes
                continue
            deltas.append(self._finish(req, FinishReason.ERROR, error=message))
        return deltas

    def release_kv(self, request_id: str) -> None:
        """Blocks kept for another worker will not be read (the gateway gave up on the handoff)."""
        if self.connector is not None and request_id in self.scheduler.kept:
            self.connector.worker.drop(request_id)

    def has_work(self) -> bool:
        return bool(self.requests) or bool(self.scheduler.kept)

    def has_runnable(self) -> bool:
        """Work a step can advance now; False after a step that found only waiting requests it
        could not admit (KV retained for better sessions, until holds end or the wait ages): the
        step loop then waits for commands a while instead of spinning."""
        return self.scheduler.has_work() and not self._stalled

    def kv_io_in_flight(self) -> bool:
        """Connector loads or saves are under way (the step loop polls them)."""
        return self.connector is not None and self.connector.worker.busy()

    # --- the step -------------------------------------------------------------------------
    def step(self) -> list[RequestDelta]:
        self.retention.expire(time.monotonic())
        deltas = self._apply_connector_events()
        out = self.scheduler.schedule()
        self._stalled = not (out.seqs or out.loads or out.preempted or out.capacity_finished or deltas) \
            and not self.scheduler.running and not self.scheduler.loading
        self._demote()
        result = self._execute(out)
        deltas += self._update(out, result)
        self._propose()
        return deltas

    def _execute(self, out: SchedulerOutput) -> StepResult | None:
        seqs = out.seqs
        if out.loads:
            failed = self.connector.worker.start_loads(out.loads)
            if failed:   # synchronous loads that failed: those requests recompute from the front
                for seq in seqs:
                    if seq.request.request_id in failed:
                        log.warning("KV load for %s failed (%s); recomputing the prompt locally",
                                    seq.request.request_id, failed[seq.request.request_id])
                        self.scheduler.load_failed(seq.request)
                seqs[:] = [s for s in seqs if s.request.request_id not in failed]
        if not seqs:
            return None
        tables = [self.kv.block_ids(s.request.request_id) for s in seqs]
        inputs = self.runner.prepare(seqs, tables)
        return self.runner.execute(inputs, self._start_grammar_masks(inputs.sampled))

    def _start_grammar_masks(self, sampled: list[ScheduledSeq]) -> Callable[[], GrammarMasks] | None:
        """The constrained rows' token masks, for the runner to apply before sampling. Many rows
        are filled on a helper thread while the forward runs; a few (~5 us each) are filled here,
        since handing them to a thread costs more than filling them."""
        rows = sum(seq.num_verified for seq in sampled if seq.request.grammar is not None)
        if rows == 0:
            return None
        if rows <= _INLINE_MASK_ROWS:
            masks = self._grammar_masks(sampled)
            return lambda: masks
        if self._mask_thread is None:
            self._mask_thread = ThreadPoolExecutor(1, thread_name_prefix="grammar-masks",
                                                   initializer=compute_alone)
        return self._mask_thread.submit(self._grammar_masks, sampled).result

    def _grammar_masks(self, sampled: list[ScheduledSeq]) -> GrammarMasks:
        bitmask = allocate_masks(sum(seq.num_verified for seq in sampled), self.loaded.arch.vocab_size)
        rows: list[int] = []
        at = 0
        for seq in sampled:
            grammar = seq.request.grammar
            if grammar is not None:
                grammar.mask_rows(bitmask, at, seq.proposed)
                rows.extend(range(at, at + seq.num_verified))
            at += seq.num_verified
        return GrammarMasks(bitmask, rows)

    def _update(self, out: SchedulerOutput, result: StepResult | None) -> list[RequestDelta]:
        deltas = [self._finish(req, FinishReason.LENGTH) for req in out.capacity_finished]
        if result is None:
            return deltas
        sampled = {s.request.request_id: s for s in result.sampled}
        for seq in out.seqs:
            done = sampled.get(seq.request.request_id)
            num_accepted = accepted_length(done.proposed, done.token_ids) if done else 0
            self.scheduler.computed(seq, num_accepted)
            if seq.proposed:
                self.spec.count(len(seq.proposed), num_accepted)
                self.proposer.observe(seq.request, len(seq.proposed), num_accepted)
        for req, scored in result.prompt_logprobs:
            req.prompt_logprobs += scored
        for seq in out.seqs:
            done = sampled.get(seq.request.request_id)
            if done is not None:
                deltas.append(self._accept(done))
                self.scheduler.publish_accepted(seq)
        return deltas

    def _accept(self, done: SampledSeq) -> RequestDelta:
        """Append the agreed proposals and the target's next token, one at a time, until the
        request finishes; one delta for all of them."""
        req: Request = done.request  # type: ignore[assignment]
        keep = accepted_length(done.proposed, done.token_ids) + 1
        tokens: list[int] = []
        texts: list[str] = []
        logprobs: list[TokenLogprob] = []
        finish: FinishReason | None = None
        for token, logprob in zip(done.token_ids[:keep], done.logprobs[:keep]):
            text, finish = self._append_token(req, token)
            tokens.append(token)
            texts.append(text)
            if logprob is not None:
                logprobs.append(logprob)
            if finish is not None:
                break
        req.proposed_token_ids = []
        text = "".join(texts)
        lps = logprobs or None
        if finish is None and not req.prefill_only:
            return self._delta(req, tokens, text, lps)
        if finish is None:
            # hand-over: text held back (a split character, a possible stop string) is released
            # by the decode worker's detokenizer, which resumes from this token
            return self._finish(req, None, tokens, text, lps)
        text += req.detokenizer.flush()
        return self._finish(req, finish, tokens, text, lps)

    def _append_token(self, req: Request, token: int) -> tuple[str, FinishReason | None]:
        """The token becomes the request's; returns its text and why the request ends, if it does."""
        if req.first_token_time is None:
            req.first_token_time = time.monotonic()
            self.num_prompt_tokens += req.num_prompt_tokens
        self.num_generation_tokens += 1
        req.append_token(token)
        params = req.sampling
        n_out = len(req.output_token_ids)
        stop_token = (not params.ignore_eos and token in self.loaded.eos_token_ids) \
            or token in params.stop_token_ids
        if stop_token and n_out >= params.min_tokens:
            return "", FinishReason.STOP
        if req.grammar is not None and not req.grammar.accept(token):
            # only a stop token the grammar does not list can get here (its mask allowed the rest)
            return "", FinishReason.STOP
        step = req.detokenizer.push([token])
        if step.stopped:
            return step.text, FinishReason.STOP
        if n_out >= params.max_tokens or req.num_tokens >= self.max_model_len:
            return step.text, FinishReason.LENGTH
        return step.text, None

    def _propose(self) -> None:
        """Draft tokens for the decodes of the next step, trimmed to what max_tokens and the
        context leave after the token that step samples anyway."""
        if self.proposer is None:
            return
        decoding = [r for r in self.scheduler.running if r.num_computed_tokens == r.num_tokens - 1
                    and not r.prefill_only]
        if not decoding:
            return
        for req, draft in zip(decoding, self.proposer.propose(decoding)):
            room = min(req.sampling.max_tokens - len(req.output_token_ids),
                       self.max_model_len - req.num_tokens) - 1
            draft = list(draft[:max(0, room)])
            if req.grammar is not None and draft:   # cut at the first token the grammar rejects
                draft = draft[:req.grammar.valid_prefix(draft)]
            req.proposed_token_ids = draft

    def _delta(self, req: Request, tokens: list[int], text: str,
               logprobs: list[TokenLogprob] | None, **final) -> RequestDelta:
        # the scored prompt goes out with the stream's first token (never with a resumed one)
        first = req.sampling.prompt_logprobs is not None and tokens \
            and len(req.output_token_ids) == len(tokens)
        return RequestDelta(request_id=req.request_id, new_token_ids=tokens, new_text=text,
                            logprobs=logprobs, prompt_logprobs=req.prompt_logprobs if first else None,
                            num_prompt_tokens=req.num_prompt_tokens,
                            num_cached_tokens=req.num_cached_tokens,
                            num_output_tokens=len(req.output_token_ids), **final)

    def _finish(self, req: Request, reason: FinishReason | None, tokens: list[int] | None = None,
                text: str = "", logprobs: list[TokenLogprob] | None = None,
                error: str | None = None) -> RequestDelta:
        """End the request. `reason` None: a prefill handed over to another worker (the
        connector keeps its blocks and returns the handle for the client)."""
        req.finish_reason = reason
        self._end_turn(req, reason)   # before the scheduler frees its blocks
        kept = self.scheduler.finish(req)
        if self.proposer is not None:
            self.proposer.finished(req)
        self._start_connector_io(kept)
        req.status = RequestStatus.FINISHED
        req.finished_time = time.monotonic()
        del self.requests[req.request_id]
        timings = RequestTimings(req.arrival_time, req.first_scheduled_time, req.first_token_time,
                                 req.finished_time)
        return self._delta(req, tokens or [], text, logprobs, finished=True, finish_reason=reason,
                           timings=timings, error=error, kv_handle=kept.kv_handle)

    # --- retention across an agent's tool calls ------------------------------------------------
    def _end_turn(self, req: Request, reason: FinishReason | None) -> None:
        """Tell the retainer how the session's turn ended, with the blocks the next turn resends."""
        if not self.retention.enabled:
            return
        key = session_key(req.context)
        text = req.detokenizer.text if req.detokenizer is not None else ""
        end = turn_end(reason, text, req.context.agent, key is not None)
        blocks = () if end is TurnEnd.NONE else self.kv.cached_blocks(
            req.request_id, req.all_token_ids, req.num_computed_tokens, req.cache_keys)
        tenant = req.context.tenant
        self.retention.finished(key, tenant, end, self.retention.retain_seconds(key, tenant, req.context.agent),
                                blocks, req.cache_keys, time.monotonic(), req.context.priority)

    def _demote(self) -> None:
        """Retained blocks the schedule just took for new data: copied down to the host tier, if
        the connector has one and lacks them, before this step's forward overwrites them."""
        demoted = self.kv.pool.demoted
        if not demoted:
            return
        self.kv.pool.demoted = []
        if self.connector is not None:
            self.connector.worker.demote(demoted)

    # --- the KV connector's worker side -------------------------------------------------------
    def _start_connector_io(self, kept: FinishedKV) -> None:
        if kept.saves:
            self.connector.worker.start_saves(kept.saves)
        if kept.give_up is not None:
            self.connector.worker.give_up(kept.give_up)

    def _apply_connector_events(self) -> list[RequestDelta]:
        """Loads that finished or failed, and kept blocks that may be freed, since the last step."""
        if self.connector is None:
            return []
        events = self.connector.worker.poll()
        for request_id in events.released:
            self.scheduler.release(request_id)
        deltas: list[RequestDelta] = []
        for request_id in events.loaded + list(events.failed):
            req = self.requests[request_id]
            if req.finish_reason in (FinishReason.ABORT, FinishReason.ERROR):
                deltas.append(self._finish(req, req.finish_reason))
            elif request_id in events.failed:
                # the source is gone or unreachable; this worker has the tokens, so it
                # recomputes the prompt instead of failing the stream
                log.warning("KV load for %s failed (%s); recomputing the prompt locally",
                            request_id, events.failed[request_id])
                self.scheduler.load_failed(req)
            else:
                self.scheduler.load_done(req)
        return deltas

    # --- observation --------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        running = list(self.scheduler.running)
        waiting = list(self.scheduler.waiting)
        pool = self.kv.pool
        return EngineStats(
            num_running=len(running), num_waiting=len(waiting) + len(self.scheduler.loading),
            num_blocks_total=pool.num_blocks, num_blocks_free=pool.num_free,
            num_blocks_cached=pool.num_cached, kv_cache_usage=pool.usage(),
            prefix_cache_queries=self.kv.prefix_queries, prefix_cache_hits=self.kv.prefix_hits,
            prompt_tokens=self.num_prompt_tokens,
            generation_tokens=self.num_generation_tokens,
            num_preemptions=self.scheduler.num_preemptions,
            waiting_prefill_tokens=sum(max(0, r.num_prompt_tokens - r.num_computed_tokens)
                                       for r in running + waiting),
            # a request still computing its prompt counts in waiting_prefill_tokens only, as the
            # gateway tracks it (its context starts with the first token)
            running_context_tokens=sum(r.num_tokens for r in running
                                       if r.num_computed_tokens >= r.num_tokens - 1),
            spec_num_drafts=self.spec.num_drafts, spec_num_draft_tokens=self.spec.num_draft_tokens,
            spec_num_accepted_tokens=self.spec.num_accepted_tokens,
            spec_accepted_per_pos=tuple(self.spec.accepted_per_pos),
            kv_tier_stats=self.connector.worker.tier_stats() if self.connector else (),
            kv_tier_weights=self.connector.worker.tier_weights() if self.connector else (),
            kv_handoff_stats=self.connector.worker.handoff_stats() if self.connector else (),
            retained_blocks=pool.num_retained, retention_hits=self.retention.hits,
            retention_expired=self.retention.expired, retention_evicted_blocks=pool.num_retained_evicted,
            turn_gap_counts=self.retention.gap_histogram(), turn_gap_sum=self.retention.gap_sum)

    def shutdown(self) -> None:
        self.runner.close()   # a parallel runner stops its other ranks
        self.grammars.close()
        if self._mask_thread is not None:
            self._mask_thread.shutdown(wait=True)
        if self.connector is not None:
            self.connector.worker.close()
