"""Engine microbenchmark measurements: tandem's offline engine and HF transformers on the same
weights, same threads, same token ids.

Two measurements, each a pure function of (model, workload) returning plain numbers:
- offline throughput: N requests of mixed prompt and output lengths, greedy, EOS ignored.
  tandem gets all N at once (continuous batching); transformers runs left-padded batches of
  `batch_size`, sorted by requested output length (its best case: a batch decodes until its
  longest request is done), and only the requested tokens count as useful output.
- batch-1 decode: one prompt, `max_new_tokens` greedy tokens; time per output token after the
  first (TPOT) from a timestamp taken as each token comes out.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import torch

from tandem.engine.llm import LLM
from tandem.types import EngineRequest, SamplingParams

FIRST_PROMPT_ID = 16  # prompt token ids are drawn from [FIRST_PROMPT_ID, vocab): no special tokens


@dataclass(frozen=True)
class OfflineWorkload:
    prompts: list[list[int]]   # token ids per request
    output_lens: list[int]     # requested output tokens per request (EOS ignored)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    @property
    def output_tokens(self) -> int:
        return sum(self.output_lens)


def offline_workload(num_requests: int, prompt_range: tuple[int, int], output_range: tuple[int, int],
                     vocab_size: int, lengths_seed: int, tokens_seed: int) -> OfflineWorkload:
    """Lengths uniform in the (inclusive) ranges from `lengths_seed`; token ids from `tokens_seed`
    (a new tokens seed per repetition keeps the prefix cache from turning repeats into hits)."""
    lengths = random.Random(lengths_seed)
    plens = [lengths.randint(*prompt_range) for _ in range(num_requests)]
    olens = [lengths.randint(*output_range) for _ in range(num_requests)]
    tokens = random.Random(tokens_seed)
    prompts = [[tokens.randrange(FIRST_PROMPT_ID, vocab_size) for _ in range(n)] for n in plens]
    return OfflineWorkload(prompts, olens)


@dataclass(frozen=True)
class ThroughputRun:
    seconds: float
    prompt_tokens: int
    output_tokens: int        # useful (requested) output tokens
    computed_tokens: int      # tokens the engine actually ran through the model (padding included)
    cached_tokens: int = 0    # prompt tokens served from tandem's prefix cache (should be 0)

    @property
    def output_tps(self) -> float:
        return self.output_tokens / self.seconds

    @property
    def total_tps(self) -> float:
        return (self.prompt_tokens + self.output_tokens) / self.seconds

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens, "computed_tokens": self.computed_tokens,
                "cached_tokens": self.cached_tokens, "output_tps": self.output_tps,
                "total_tps": self.total_tps}


@dataclass(frozen=True)
class DecodeRun:
    ttft_s: float             # prompt in -> first token out
    tpot_s: float             # mean time per output token after the first
    tokens: list[int]

    def to_dict(self) -> dict:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "num_tokens": len(self.tokens)}


# --- tandem -----------------------------------------------------------------------------------
def tandem_throughput(llm: LLM, wl: OfflineWorkload) -> ThroughputRun:
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in wl.output_lens]
    t0 = time.perf_counter()
    outs = llm.generate(wl.prompts, params)
    seconds = time.perf_counter() - t0
    for out, n in zip(outs, wl.output_lens):
        if len(out.token_ids) != n:
            raise RuntimeError(f"tandem produced {len(out.token_ids)} tokens, {n} requested")
    return ThroughputRun(seconds, wl.prompt_tokens, wl.output_tokens,
                         wl.prompt_tokens + wl.output_tokens,
                         cached_tokens=sum(o.num_cached_tokens for o in outs))


def tandem_decode(llm: LLM, prompt: list[int], max_new_tokens: int, request_id: str) -> DecodeRun:
    engine = llm.engine
    engine.add_request(EngineRequest(request_id, list(prompt),
                                     SamplingParams(max_tokens=max_new_tokens, temperature=0.0,
                                                    ignore_eos=True)))
    t0 = time.perf_counter()
    stamps: list[float] = []
    tokens: list[int] = []
    while engine.has_work():
        for delta in engine.step():
            now = time.perf_counter()
            for token in delta.new_token_ids:
                stamps.append(now)
                tokens.append(token)
    return _decode_run(t0, stamps, tokens)


# --- transformers -------------------------------------------------------------------------------
class _TokenClock:
    """A transformers streamer that timestamps every generated token (the first put is the prompt)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, new_tokens: int,
                pad_token_id: int, streamer=None) -> torch.Tensor:
    """Greedy, exactly `new_tokens` tokens per row (min = max suppresses EOS): [B, P + new]."""
    with torch.inference_mode():
        return model.generate(input_ids=input_ids, attention_mask=attention_mask,
                              max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              temperature=None, top_p=None, top_k=None,
                              pad_token_id=pad_token_id, streamer=streamer)


def left_padded(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """-> input_ids [B, max_len], attention_mask [B, max_len] (padding on the left)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    return ids, mask


HF_ORDERS = ("sorted", "arrival")


def hf_throughput(model, wl: OfflineWorkload, batch_size: int, pad_token_id: int,
                  order: str = "sorted") -> ThroughputRun:
    """`generate` over left-padded batches of `batch_size` requests, each batch decoding until its
    longest request ends. order "sorted": requests by requested output length, longest first, so
    that a batch wastes little decoding (transformers' best case, which needs the lengths in
    advance); "arrival": in workload order, as a caller with a queue of requests would batch them."""
    if order not in HF_ORDERS:
        raise ValueError(f"order must be one of {HF_ORDERS}, not {order!r}")
    order_ids = list(range(len(wl.prompts)))
    if order == "sorted":
        order_ids.sort(key=lambda i: wl.output_lens[i], reverse=True)
    batches = [order_ids[i:i + batch_size] for i in range(0, len(order_ids), batch_size)]
    computed = 0
    t0 = time.perf_counter()
    for batch in batches:
        prompts = [wl.prompts[i] for i in batch]
        new = max(wl.output_lens[i] for i in batch)
        ids, mask = left_padded(prompts, pad_token_id)
        out = hf_generate(model, ids, mask, new, pad_token_id)
        if out.shape != (len(batch), ids.shape[1] + new):
            raise RuntimeError(f"transformers returned shape {tuple(out.shape)}")
        computed += out.numel()
    seconds = time.perf_counter() - t0
    return ThroughputRun(seconds, wl.prompt_tokens, wl.output_tokens, computed)


def hf_decode(model, prompt: list[int], max_new_tokens: int, pad_token_id: int) -> DecodeRun:
    clock = _TokenClock()
    ids = torch.tensor([prompt], dtype=torch.long)
    t0 = time.perf_counter()
    out = hf_generate(model, ids, torch.ones_like(ids), max_new_tokens, pad_token_id, streamer=clock)
    return _decode_run(t0, clock.stamps, out[0, len(prompt):].tolist())


def _decode_run(t0: float, stamps: list[float], tokens: list[int]) -> DecodeRun:
    if len(stamps) < 2:
        raise RuntimeError("decode measurement needs at least 2 output tokens")
    return DecodeRun(ttft_s=stamps[0] - t0, tpot_s=(stamps[-1] - stamps[0]) / (len(stamps) - 1),
                     tokens=tokens)


def load_hf_model(path: str, dtype: str):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
