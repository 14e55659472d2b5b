"""A request's state inside the engine.

One rule drives scheduling: `num_computed_tokens` catches up with `num_tokens` (prompt plus
output). A prefill chunk, a decode, a recompute after preemption and a KV load all just
advance that counter; the step whose new tokens reach `num_tokens` samples the next token.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from tandem.kv.block_hash import Partition, cache_keys
from tandem.types import EngineRequest, FinishReason, KVHandle, RequestContext, SamplingParams, TokenLogprob


class RequestStatus(enum.Enum):
    WAITING = "waiting"              # not admitted yet (or preempted, to be recomputed)
    WAITING_FOR_KV = "waiting_for_kv"  # admitted; its KV is being loaded by the KV connector
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    context: RequestContext = RequestContext()
    arrival_time: float = field(default_factory=time.monotonic)
    prefill_only: bool = False
    kv_handle: KVHandle | None = None
    # Output so far. The first `num_resumed` tokens were generated elsewhere and already
    # reached the client: they are context and count toward max_tokens, but are not emitted.
    output_token_ids: list[int] = field(default_factory=list)
    num_resumed: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0        # prompt tokens found in a cache at first admission
    lookup_counted: bool = False      # its prefix lookup is in the cache's hit statistics
    num_preemptions: int = 0
    admitted_level: int | None = None  # the priority level it was admitted at (tandem/engine/priority.py)
    queue_order: int = 0              # its place in the waiting queue's first-come order (the scheduler's)
    external_kv_failed: bool = False  # a KV load from outside failed: computed here from then on
    finish_reason: FinishReason | None = None
    error: str | None = None
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    detokenizer: Any = None           # IncrementalDetokenizer, made by the engine at admission
    grammar: Any = None               # RequestGrammar (tandem/grammar) when sampling.grammar is set
    # prompt tokens 1.. scored so far (SamplingParams.prompt_logprobs); kept across preemption
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    all_token_ids: list[int] = field(default_factory=list)  # prompt + output, kept in step
    # draft tokens to verify after the last token at the next step (set by the engine's proposer;
    # not the request's tokens until accepted)
    proposed_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.all_token_ids = self.prompt_token_ids + self.output_token_ids

    def append_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)

    @classmethod
    def from_engine_request(cls, req: EngineRequest) -> "Request":
        return cls(request_id=req.request_id, prompt_token_ids=list(req.prompt_token_ids),
                   sampling=req.sampling, context=req.context, arrival_time=req.arrival_time,
                   prefill_only=req.prefill_only, kv_handle=req.kv_handle,
                   output_token_ids=list(req.resume_output_ids),
                   num_resumed=len(req.resume_output_ids))

    @property
    def cache_salt(self) -> str | None:
        return self.context.cache_salt

    @property
    def cache_keys(self) -> Partition:
        """Its KV partition: the extra keys of its block hashes (cache salt and tenant)."""
        return cache_keys(self.context)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def scores_prompt(self) -> bool:
        """Prompt tokens remain to be scored. A resumed request's prompt was scored (and sent)
        by the pass that generated its first tokens."""
        return (self.sampling.prompt_logprobs is not None and self.num_resumed == 0
                and len(self.prompt_logprobs) < self.num_prompt_tokens - 1)

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
