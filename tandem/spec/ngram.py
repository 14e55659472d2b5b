"""Prompt lookup (n-gram) proposals: agents repeat their context (tool names, arguments, file
contents, earlier answers), so the tokens that followed the last earlier occurrence of the
sequence's current suffix are a good guess for what comes next.

For n from `max_n` down to `min_n`: find the most recent earlier position where the last n tokens
occurred, and propose the (up to k) tokens that followed it. The search is vectorized over a
per-request numpy copy of its tokens, grown as tokens are appended, so a step costs a few array
comparisons even over a 60,000-token agent context.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tandem.config import SpeculativeConfig

if TYPE_CHECKING:   # n-gram lookup needs no target; its module stays free of torch
    from tandem.spec.target import SpecTarget


class _Tokens:
    """A request's tokens as a growing int32 array (capacity doubles)."""

    def __init__(self) -> None:
        self.array = np.empty(0, dtype=np.int32)
        self.length = 0

    def sync(self, tokens: Sequence[int]) -> np.ndarray:
        n = len(tokens)
        if n < self.length:   # a request's tokens only grow; a shorter list is a new sequence
            self.length = 0
        if n > self.array.size:
            grown = np.empty(max(n, 2 * self.array.size, 256), dtype=np.int32)
            grown[:self.length] = self.array[:self.length]
            self.array = grown
        if n > self.length:
            self.array[self.length:n] = tokens[self.length:n]
            self.length = n
        return self.array[:n]


def lookup(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """The tokens after the most recent earlier occurrence of the longest suffix (min_n..max_n
    tokens) of `tokens` [L], at most k of them; [] when none occurs."""
    size = tokens.size
    for n in range(min(max_n, size - 1), min_n - 1, -1):
        pattern = tokens[size - n:]
        # start positions i < size - n (an earlier occurrence) whose n tokens equal the pattern
        candidates = np.flatnonzero(tokens[:size - n] == pattern[0])
        for j in range(1, n):
            if candidates.size == 0:
                break
            candidates = candidates[tokens[candidates + j] == pattern[j]]
        if candidates.size:
            start = int(candidates[-1]) + n
            return tokens[start:start + k].tolist()
    return []


class NgramProposer:
    def __init__(self, k: int, min_n: int, max_n: int) -> None:
        self.k = k
        self.min_n = min_n
        self.max_n = max_n
        self._tokens: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # request -> _Tokens

    def propose(self, requests: Sequence, limits: Sequence[int] | None = None) -> list[list[int]]:
        out = []
        for i, req in enumerate(requests):
            k = self.k if limits is None else min(self.k, limits[i])
            state = self._tokens.get(req)
            if state is None:
                state = self._tokens[req] = _Tokens()
            tokens = state.sync(req.all_token_ids)
            out.append(lookup(tokens, self.min_n, self.max_n, k) if k > 0 else [])
        return out

    def observe(self, request, num_proposed: int, num_accepted: int) -> None:
        pass

    def finished(self, request) -> None:
        self._tokens.pop(request, None)


def build(cfg: SpeculativeConfig, target: SpecTarget | None) -> NgramProposer:
    """{"method": "ngram"} (tandem/spec/registry.py)."""
    return NgramProposer(cfg.num_speculative_tokens, cfg.prompt_lookup_min, cfg.prompt_lookup_max)
