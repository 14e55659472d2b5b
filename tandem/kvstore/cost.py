"""Load or recompute: a hit below the device is worth loading only while it is cheaper.

    recompute(block)   = block_size * prefill_s_per_token           (the engine's own speed)
    load(block, tier)  = seconds per block read from that tier       (measured on every read)
    savings(n)         = sum over the first n blocks of recompute - load(tier of the block)

The load takes the prefix length with the largest savings (none if no prefix saves time), so a
slow tier never makes a request slower than computing its prompt. A tier's cost starts from a
bandwidth guess and follows its reads as an exponentially weighted mean of seconds per block
(reads are batches, so the per-call overhead is spread over the blocks it moved). A tier judged
too slow is never read, so its estimate could never improve: once per `explore_s` a tier not
measured for that long is taken at no cost for one decision (one load measures it again). The
prefill speed is measured once when the engine starts (`measure_prefill`), or given in the config.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import torch

from tandem.layers.attention_batch import AttentionBatch, SeqSlice

# first guesses, replaced by measurements: bytes per second and seconds per call (of ~8 blocks)
_GUESS = {"host": (4e9, 1e-5), "disk": (1e9, 1e-4), "store": (0.5e9, 5e-4)}
_GUESS_BLOCKS_PER_CALL = 8


class CostModel:
    def __init__(self, prefill_s_per_token: float, block_size: int, block_nbytes: int,
                 enabled: bool = True, alpha: float = 0.25, explore_s: float | None = 30.0,
                 clock=time.monotonic) -> None:
        self.prefill_s_per_token = prefill_s_per_token
        self.block_size = block_size
        self.enabled = enabled
        self.alpha = alpha
        self.explore_s = explore_s     # None: never explore
        self._clock = clock
        self._block_s = {tier: block_nbytes / bw + call / _GUESS_BLOCKS_PER_CALL
                         for tier, (bw, call) in _GUESS.items()}
        self._measured: dict[str, float] = {}   # tier -> when last measured (or explored)
        self._lock = threading.Lock()

    def block_seconds(self, tier: str) -> float:
        return self._block_s[tier]

    def observe(self, tier: str, num_blocks: int, seconds: float) -> None:
        """A read of `num_blocks` blocks from `tier` took `seconds`."""
        if num_blocks <= 0:
            return
        with self._lock:
            old = self._block_s[tier]
            self._block_s[tier] = old + self.alpha * (seconds / num_blocks - old)
            self._measured[tier] = self._clock()

    def weights(self, tiers: Sequence[str]) -> tuple[float, ...]:
        """Per tier, loading a block against recomputing it (the ratio `prefix_to_load` weighs; at
        1 or more a hit there saves nothing); () when the model is off (every hit is loaded)."""
        if not self.enabled:
            return ()
        recompute = self.block_size * self.prefill_s_per_token
        with self._lock:
            return tuple(self._block_s[t] / recompute if recompute > 0 else 0.0 for t in tiers)

    def prefix_to_load(self, tiers: Sequence[str]) -> int:
        """How many of the leading blocks (tiers[i] holds block i) to load."""
        if not self.enabled:
            return len(tiers)
        recompute = self.block_size * self.prefill_s_per_token
        now = self._clock()
        stale = set() if self.explore_s is None else \
            {t for t in tiers if now - self._measured.get(t, -float("inf")) > self.explore_s}
        savings = best = 0.0
        n = 0
        for i, tier in enumerate(tiers):
            savings += recompute - (0.0 if tier in stale else self._block_s[tier])
            if savings > best:
                best, n = savings, i + 1
        with self._lock:
            for tier in stale.intersection(tiers[:n]):
                self._measured[tier] = now   # explored: the load about to start measures it
        return n


def measure_prefill(model: torch.nn.Module, kv_cache: torch.Tensor, block_size: int,
                    num_tokens: int, vocab_size: int) -> float:
    """Seconds per token of one prefill chunk of `num_tokens` tokens at the start of a sequence,
    on this engine's model (the second of two runs: the first pays one-time costs). Writes KV
    into the first blocks of `kv_cache` and zeroes them again: call before serving starts."""

    num_blocks = -(-num_tokens // block_size)
    device = kv_cache.device
    ids = torch.randint(0, vocab_size, (num_tokens,), generator=torch.Generator().manual_seed(0)).to(device)
    positions = torch.arange(num_tokens, device=device)
    batch = AttentionBatch.build([SeqSlice(list(range(num_blocks)), 0, num_tokens)], block_size, device)
    elapsed = float("inf")
    with torch.inference_mode():
        for _ in range(2):
            start = time.perf_counter()
            model(ids, positions, batch, kv_cache)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = min(elapsed, time.perf_counter() - start)
        kv_cache[:num_blocks].zero_()
    return elapsed / num_tokens
