"""Offline batch generation on one engine, for scripts and benchmarks (like vLLM's `LLM`).

For throughput, give it `EngineConfig(..., scheduler=SchedulerConfig.offline())`: the default
scheduler is tuned for streams waiting on their next token.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tandem.config import EngineConfig
from tandem.engine.engine import Engine
from tandem.types import EngineRequest, FinishReason, RequestDelta, SamplingParams, TokenLogprob


@dataclass(frozen=True)
class Completion:
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: FinishReason | None
    num_cached_tokens: int
    prompt_logprobs: list[TokenLogprob] | None = None  # tokens 1.. of the prompt, when asked for


class LLM:
    def __init__(self, config: EngineConfig) -> None:
        self.engine = Engine.from_config(config)
        # offline runs want full speed from the first step, not the earliest first token: the
        # weight packing (low priority, it yields most of the core to serving) is finished here
        self.engine.loaded.wait_packed()
        self._ids = itertools.count()

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]
                 ) -> list[Completion]:
        """Run every prompt (token ids) to completion; results in prompt order."""
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        ids = [f"llm-{next(self._ids)}" for _ in prompts]
        for rid, prompt, p in zip(ids, prompts, per_prompt):
            self.engine.add_request(EngineRequest(rid, list(prompt), p))
        deltas: dict[str, list[RequestDelta]] = {rid: [] for rid in ids}
        while self.engine.has_work():
            for d in self.engine.step():
                deltas[d.request_id].append(d)
        return [Completion(list(prompt), [t for d in deltas[rid] for t in d.new_token_ids],
                           "".join(d.new_text for d in deltas[rid]), deltas[rid][-1].finish_reason,
                           deltas[rid][-1].num_cached_tokens,
                           next((d.prompt_logprobs for d in deltas[rid] if d.prompt_logprobs is not None), None))
                for rid, prompt in zip(ids, prompts)]

    def shutdown(self) -> None:
        self.engine.shutdown()
