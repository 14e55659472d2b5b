"""A tiny Backend (and tokenizer) for route tests: scripted replies, no model.

Tokens are bytes: id = byte + 3 (0 = BOS, 1 = EOS, 2 = PAD). The backend answers every
request with `reply` one token per delta, honouring max_tokens and stop strings, and keeps
books of what is running and what was aborted so tests can check cancellation.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from tandem.errors import PromptTooLong
from tandem.api.backend import ResponseInfo
from tandem.types import (EngineRequest, EngineStats, FinishReason, RequestDelta, RequestTimings,
                          TokenLogprob)

BOS, EOS, PAD = 0, 1, 2


class ByteTokenizer:
    vocab_size = 259
    bos_token_id = BOS
    eos_token_ids = (EOS,)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [b + 3 for b in text.encode()]
        return [BOS, *ids] if add_special_tokens else ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        out = bytearray()
        for t in ids:
            if t >= 3:
                out.append(t - 3)
            elif not skip_special_tokens:
                out += [b"<s>", b"</s>", b"<pad>"][t]
        return out.decode(errors="replace")

    def convert_ids_to_tokens(self, ids):
        return [self.decode([t], skip_special_tokens=False) for t in ids]

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, **kwargs) -> str:
        if kwargs.get("fail"):
            raise ValueError("template failure requested")
        if messages[-1]["role"] == "assistant" and messages[-1]["content"] == "bad":
            raise RuntimeError("Conversation roles must alternate")
        text = "<s>"
        if tools:
            text += "tools:" + ",".join(t["function"]["name"] for t in tools) + "\n"
        for m in messages:
            text += f"{m['role']}: {m['content']}\n"
        return text + ("assistant: " if add_generation_prompt else "")


@dataclass
class FakeBackend:
    reply: str = "Hello world"
    model_name: str = "fake-model"
    max_model_len: int = 256
    token_delay: float = 0.0          # seconds between deltas
    fail_after: int | None = None     # raise RuntimeError after this many deltas
    kv_capacity: int | None = None    # prompts longer than this raise PromptTooLong (KV too small)
    report_counts: bool = True        # False: deltas carry no token counts (a minimal backend)
    headers: dict = field(default_factory=lambda: {"x-tandem-prefill": "w1",
                                                    "x-tandem-decode": "w1"})
    tokenizer: ByteTokenizer = field(default_factory=ByteTokenizer)
    running: set = field(default_factory=set)
    aborted: list = field(default_factory=list)
    seen: list = field(default_factory=list)   # EngineRequests received
    cached_prefixes: set = field(default_factory=set)

    async def generate(self, req: EngineRequest, info: ResponseInfo | None = None):
        self.seen.append(req)
        if len(req.prompt_token_ids) >= self.max_model_len:
            raise PromptTooLong(f"prompt of {len(req.prompt_token_ids)} tokens is too long")
        if self.kv_capacity is not None and len(req.prompt_token_ids) > self.kv_capacity:
            raise PromptTooLong("the KV cache is too small for this prompt", param="messages")
        arrival = time.monotonic()
        if info is not None:
            for k, v in self.headers.items():
                info.set_header(k, v)
        key = (req.cache_salt, tuple(req.prompt_token_ids))
        cached = len(req.prompt_token_ids) // 2 if key in self.cached_prefixes else 0
        self.cached_prefixes.add(key)
        self.running.add(req.request_id)
        finished = False
        try:
            # seed shifts the reply so tests can see choices differ
            shift = (req.sampling.seed or 0) % 3 if req.sampling.temperature > 0 else 0
            reply = self.reply[shift:] + self.reply[:shift]
            ids = self.tokenizer.encode(reply, add_special_tokens=False)
            text_so_far = ""
            n_out = 0
            for k, tid in enumerate(ids):
                if self.token_delay:
                    await asyncio.sleep(self.token_delay)
                else:
                    await asyncio.sleep(0)
                if self.fail_after is not None and k >= self.fail_after:
                    raise RuntimeError("engine exploded")
                n_out += 1
                piece = self.tokenizer.decode([tid])
                text_so_far += piece
                reason = None
                stop_hit = next((s for s in req.sampling.stop if text_so_far.endswith(s)), None)
                if stop_hit is not None:
                    piece = piece[:len(piece) - len(stop_hit)] if len(stop_hit) <= len(piece) else ""
                    reason = FinishReason.STOP
                elif n_out >= req.sampling.max_tokens:
                    reason = FinishReason.LENGTH
                elif k == len(ids) - 1:
                    reason = FinishReason.STOP
                lps = None
                if req.sampling.logprobs is not None:
                    top = tuple((t, -0.5 * (r + 1)) for r, t in
                                enumerate([tid, 3 + ord("x")][:req.sampling.logprobs]))
                    lps = [TokenLogprob(tid, -0.5 if k else -math.inf, top)]
                done = reason is not None
                finished = done  # before the yield: the consumer may close us right after it
                now = time.monotonic()
                yield RequestDelta(
                    request_id=req.request_id, new_token_ids=[tid], new_text=piece,
                    finished=done, finish_reason=reason, logprobs=lps,
                    num_prompt_tokens=len(req.prompt_token_ids) if self.report_counts else 0,
                    num_cached_tokens=cached, num_output_tokens=n_out if self.report_counts else 0,
                    timings=RequestTimings(arrival, arrival + 0.001, now, now) if done else None)
                if done:
                    return
        finally:
            self.running.discard(req.request_id)
            if not finished:
                self.aborted.append(req.request_id)

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def stats(self) -> EngineStats:
        return EngineStats(num_running=len(self.running), num_waiting=0, num_blocks_total=100,
                           num_blocks_free=100 - len(self.running), num_blocks_cached=0,
                           kv_cache_usage=len(self.running) / 100, prefix_cache_queries=40,
                           prefix_cache_hits=10, prompt_tokens=0, generation_tokens=0,
                           num_preemptions=0, waiting_prefill_tokens=0,
                           running_context_tokens=0)
