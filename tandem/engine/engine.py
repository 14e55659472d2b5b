"""The synchronous engine: one `step()` = schedule, execute, update.

Not thread-safe: one thread owns it (the async front's engine thread, or a test).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import torch

from tandem.config import CacheConfig, EngineConfig
from tandem.engine.detokenizer import IncrementalDetokenizer
from tandem.engine.request import Request, RequestStatus
from tandem.engine.scheduler import KVPull, Scheduler, SchedulerOutput
from tandem.errors import InvalidRequest, PromptTooLong
from tandem.kv.events import KVEventLog
from tandem.kv.kv_cache_manager import KVCacheManager
from tandem.kv.layout import KVLayout
from tandem.models.loader import LoadedModel, load_model
from tandem.models.tokenizer import Tokenizer
from tandem.runner.model_runner import ModelRunner
from tandem.types import (EngineRequest, EngineStats, FinishReason, KVHandle, RequestDelta,
                          RequestTimings, TokenLogprob)

if TYPE_CHECKING:
    from tandem.transfer.base import Transport


def layout_of(loaded: LoadedModel, cache: CacheConfig) -> KVLayout:
    a = loaded.arch
    identity = f"{a.architecture}/L{a.num_layers}/H{a.hidden_size}/V{a.vocab_size}"
    dtype = loaded.dtype if cache.kv_cache_dtype == "auto" else torch.float8_e5m2
    return KVLayout(model=identity, dtype=str(dtype).removeprefix("torch."),
                    block_size=cache.block_size, num_layers=a.num_layers,
                    num_kv_heads=a.num_kv_heads, head_dim=a.head_dim)

log = logging.getLogger(__name__)


class Engine:
    def __init__(self, config: EngineConfig, loaded: LoadedModel, tokenizer: Tokenizer,
                 kv_cache: torch.Tensor | None = None, transport: Transport | None = None) -> None:
        """`transport` serves this worker's blocks to others (prefill) and pulls theirs (decode)."""
        self.config = config
        self.loaded = loaded
        self.tokenizer = tokenizer
        self.layout = layout_of(loaded, config.cache)
        self.max_model_len = loaded.max_model_len
        device = torch.device(config.model.device)
        if kv_cache is None:
            num_blocks = config.cache.num_blocks or config.cache.kv_cache_bytes // self.layout.block_nbytes
            kv_cache = self.layout.allocate(num_blocks, device)
        self.num_blocks = kv_cache.shape[0]
        if self.num_blocks < 2:
            raise ValueError(f"the KV cache budget holds {self.num_blocks} blocks of "
                             f"{self.layout.block_nbytes} bytes; give it more memory")
        self.events = KVEventLog()
        self.kv = KVCacheManager(self.num_blocks, config.cache.block_size,
                                 config.cache.enable_prefix_caching, config.cache.hash_seed, self.events)
        self.scheduler = Scheduler(config.scheduler, self.kv)
        self.runner = ModelRunner(loaded, self.layout, kv_cache, device)
        self.transport = transport
        self.requests: dict[str, Request] = {}
        self.handed_over: set[str] = set()   # prefill role: finished, blocks pinned for a pull
        self._pulls: dict[str, Future] = {}
        # gives up remote blocks a request will not pull (aborted or refused), off the step loop
        self._release_pool = ThreadPoolExecutor(1, thread_name_prefix="kv-release") if transport else None
        self.num_prompt_tokens = 0      # cumulative, counted when a request's first token is sampled
        self.num_generation_tokens = 0  # cumulative

    @classmethod
    def from_config(cls, config: EngineConfig) -> "Engine":
        """Load the model and tokenizer, allocate the KV cache, start the KV transport if any."""
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        loaded = load_model(config.model)
        tokenizer = Tokenizer.from_dir(config.model.path)
        kind = config.resolved_transport
        if kind is None:
            return cls(config, loaded, tokenizer)
        from tandem.transfer.factory import allocate_kv, make_transport  # only workers that hand KV over

        layout = layout_of(loaded, config.cache)
        num_blocks = config.cache.num_blocks or config.cache.kv_cache_bytes // layout.block_nbytes
        kv_cache = allocate_kv(layout, num_blocks, kind, config.model.device, config.transfer)
        transport = make_transport(kind, kv_cache, layout, config.transfer)
        transport.source.start()
        return cls(config, loaded, tokenizer, kv_cache, transport)

    # --- requests -----------------------------------------------------------------------
    def add_request(self, er: EngineRequest) -> None:
        """Admit a request to the queue, or raise a TandemError saying what to fix."""
        self.validate(er)
        req = Request.from_engine_request(er)
        req.detokenizer = IncrementalDetokenizer(
            self.tokenizer.backend, req.prompt_token_ids, stop=er.sampling.stop,
            include_stop_str_in_output=er.sampling.include_stop_str_in_output,
            skip_special_tokens=er.sampling.skip_special_tokens,
            prefix_output_ids=list(er.resume_output_ids))
        self.requests[req.request_id] = req
        self.scheduler.add(req)

    def validate(self, er: EngineRequest) -> None:
        er.sampling.validate()
        if er.request_id in self.requests or er.request_id in self.handed_over:
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
        if er.kv_handle is not None:
            if self.transport is None:
                raise InvalidRequest("this worker has no KV transport; it cannot take a kv_handle",
                                     param="kv_handle")
            if er.kv_handle.num_tokens != total - 1:
                raise InvalidRequest(f"kv_handle covers {er.kv_handle.num_tokens} tokens, expected "
                                     f"{total - 1} (prompt plus resumed tokens but the last)", param="kv_handle")
            KVLayout.from_dict(er.kv_handle.layout).check_compatible(self.layout)
        if er.prefill_only and self.transport is None:
            raise InvalidRequest("this worker has no KV transport; it cannot serve prefill_only",
                                 param="prefill_only")

    def abort(self, request_id: str) -> RequestDelta | None:
        req = self.requests.get(request_id)
        if req is None or req.finished:
            return None
        if req.status is RequestStatus.WAITING_FOR_KV:
            req.finish_reason = FinishReason.ABORT  # finished when its pull completes
            return None
        if req.kv_handle is not None and req.first_scheduled_time is None:
            self._give_up_remote(req.kv_handle)  # never admitted: its pull never started
        return self._finish(req, FinishReason.ABORT)

    def fail_all(self, message: str) -> list[RequestDelta]:
        """End every request with an error (after a failed step); frees their blocks."""
        deltas = []
        for req in list(self.requests.values()):
            if req.status is RequestStatus.WAITING_FOR_KV:
                req.finish_reason = FinishReason.ERROR  # ended when its pull completes
                continue
            deltas.append(self._finish(req, FinishReason.ERROR, error=message))
        return deltas

    def has_work(self) -> bool:
        return bool(self.requests) or bool(self.handed_over)

    def has_runnable(self) -> bool:
        return self.scheduler.has_work()

    # --- the step -------------------------------------------------------------------------
    def step(self) -> list[RequestDelta]:
        self._release_handed_over()
        out = self.scheduler.schedule()
        deltas = self._execute_and_update(out)
        deltas += self._complete_pulls()
        return deltas

    def _execute_and_update(self, out: SchedulerOutput) -> list[RequestDelta]:
        deltas = [self._finish(req, FinishReason.LENGTH) for req in out.capacity_finished]
        for pull in out.pulls:
            self._start_pull(pull)
        if not out.seqs:
            return deltas
        tables = [self.kv.block_ids(s.request.request_id) for s in out.seqs]
        inputs = self.runner.prepare(out.seqs, tables)
        result = self.runner.execute(inputs)
        for seq in out.seqs:
            seq.request.num_computed_tokens += seq.num_new_tokens
        for req, scored in result.prompt_logprobs:
            req.prompt_logprobs += scored
        sampled = result.sampled
        for req, token, logprob in zip(inputs.sampled, sampled.token_ids, sampled.logprobs):
            deltas.append(self._append_token(req, token, logprob))
        return deltas

    def _append_token(self, req: Request, token: int, logprob: TokenLogprob | None) -> RequestDelta:
        now = time.monotonic()
        if req.first_token_time is None:
            req.first_token_time = now
            self.num_prompt_tokens += req.num_prompt_tokens
        self.num_generation_tokens += 1
        req.append_token(token)
        params = req.sampling
        n_out = len(req.output_token_ids)
        finish: FinishReason | None = None
        text = ""
        stop_token = (not params.ignore_eos and token in self.loaded.eos_token_ids) \
            or token in params.stop_token_ids
        if stop_token and n_out >= params.min_tokens:
            finish = FinishReason.STOP
        else:
            step = req.detokenizer.push([token])
            text = step.text
            if step.stopped:
                finish = FinishReason.STOP
        if finish is None and (n_out >= params.max_tokens or req.num_tokens >= self.max_model_len):
            finish = FinishReason.LENGTH
        logprobs = [logprob] if logprob is not None else None
        if finish is None and not req.prefill_only:
            return self._delta(req, [token], text, logprobs)
        if finish is None:
            # hand-over: text held back (a split character, a possible stop string) is released
            # by the decode worker's detokenizer, which resumes from this token
            return self._hand_over(req, token, text, logprobs)
        text += req.detokenizer.flush()
        return self._finish(req, finish, [token], text, logprobs)

    def _delta(self, req: Request, tokens: list[int], text: str,
               logprobs: list[TokenLogprob] | None, **final) -> RequestDelta:
        # the scored prompt goes out with the stream's first token (never with a resumed one)
        first = req.sampling.prompt_logprobs is not None and tokens and len(req.output_token_ids) == 1
        return RequestDelta(request_id=req.request_id, new_token_ids=tokens, new_text=text,
                            logprobs=logprobs, prompt_logprobs=req.prompt_logprobs if first else None,
                            num_prompt_tokens=req.num_prompt_tokens,
                            num_cached_tokens=req.num_cached_tokens,
                            num_output_tokens=len(req.output_token_ids), **final)

    def _finish(self, req: Request, reason: FinishReason | None, tokens: list[int] | None = None,
                text: str = "", logprobs: list[TokenLogprob] | None = None,
                error: str | None = None, keep_blocks: bool = False,
                kv_handle: KVHandle | None = None) -> RequestDelta:
        self.scheduler.remove(req)
        if not keep_blocks:
            self.kv.free(req.request_id)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.finished_time = time.monotonic()
        del self.requests[req.request_id]
        timings = RequestTimings(req.arrival_time, req.first_scheduled_time, req.first_token_time,
                                 req.finished_time)
        return self._delta(req, tokens or [], text, logprobs, finished=True, finish_reason=reason,
                           timings=timings, error=error, kv_handle=kv_handle)

    # --- disaggregation: prefill side -------------------------------------------------------
    def _hand_over(self, req: Request, token: int, text: str,
                   logprobs: list[TokenLogprob] | None) -> RequestDelta:
        """Prefill done: keep the blocks pinned and describe them for the decode worker."""
        block_ids = self.kv.block_ids(req.request_id)
        num_full = req.num_computed_tokens // self.layout.block_size
        hashes = self.kv.block_hashes(req.request_id, req.all_token_ids, req.cache_salt)[:num_full]
        self.transport.source.offer(req.request_id, block_ids)
        handle = KVHandle(worker=self.transport.source.address, request_id=req.request_id,
                          block_ids=tuple(block_ids), num_tokens=req.num_computed_tokens,
                          layout=self.layout.to_dict(), block_hashes=tuple(hashes),
                          transport=self.transport.kind)
        self.handed_over.add(req.request_id)
        return self._finish(req, None, [token], text, logprobs, keep_blocks=True, kv_handle=handle)

    def withdraw_handed_over(self, request_id: str) -> bool:
        """No decode worker will pull this request's blocks: let the transport release them."""
        if request_id not in self.handed_over:
            return False
        self.transport.source.withdraw(request_id)
        return True

    def _release_handed_over(self) -> None:
        if not self.handed_over:
            return
        for request_id in self.transport.source.poll_released():
            if request_id in self.handed_over:
                self.handed_over.discard(request_id)
                self.kv.free(request_id)

    # --- disaggregation: decode side --------------------------------------------------------
    def _start_pull(self, pull: KVPull) -> None:
        self._pulls[pull.request.request_id] = self.transport.sink.pull_async(
            pull.request.kv_handle, pull.dst_block_ids, pull.src_indices)

    def _give_up_remote(self, handle: KVHandle) -> None:
        self._release_pool.submit(self.transport.sink.release, handle)

    def _complete_pulls(self) -> list[RequestDelta]:
        deltas: list[RequestDelta] = []
        for request_id, future in list(self._pulls.items()):
            if not future.done():
                continue
            del self._pulls[request_id]
            req = self.requests[request_id]
            if req.finish_reason in (FinishReason.ABORT, FinishReason.ERROR):
                deltas.append(self._finish(req, req.finish_reason))
            elif future.exception() is not None:
                # The prefill worker's copy is gone or unreachable; this worker has the
                # tokens, so it recomputes the prompt instead of failing the stream.
                log.warning("KV pull for %s from %s failed (%s); recomputing the prompt locally",
                            request_id, req.kv_handle.worker, future.exception())
                self.scheduler.requeue(req)
            else:
                self.scheduler.pull_done(req)
        return deltas

    def pulls_in_flight(self) -> bool:
        return bool(self._pulls)

    # --- observation --------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        running = list(self.scheduler.running)
        waiting = list(self.scheduler.waiting)
        pool = self.kv.pool
        return EngineStats(
            num_running=len(running), num_waiting=len(waiting) + len(self.scheduler.pulling),
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
                                       if r.num_computed_tokens >= r.num_tokens - 1))

    def shutdown(self) -> None:
        if self._release_pool is not None:
            self._release_pool.shutdown(wait=True, cancel_futures=True)
        if self.transport is not None:
            self.transport.close()
