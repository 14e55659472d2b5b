"""A growing token sequence with, for each token id, the positions where it occurs.

The suffix proposer (tandem/spec/suffix.py) asks "where did the sequence's last token occur
before?" at every step, over contexts of tens of thousands of tokens, so both growing and asking
must stay cheap:
- tokens live in an int32 array whose capacity doubles (appending copies only the new tokens);
- positions [0, bulk) are indexed by one sort (`_order`, positions sorted by token,
  then position: one sort of packed 64-bit keys) and looked up with two binary searches; positions [bulk, length) sit in a
  small dict of lists (`_tail`). When the tail grows past a share of the bulk, the whole index
  is rebuilt with one argsort (a few ms at 60,000 tokens), so appending a token is amortized
  O(log N) in C plus one dict append, and a long prompt is indexed in one argsort.
Negative ids are separators (tandem/spec/tenant_history.py): stored, never indexed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SEPARATOR = -1
_MIN_TAIL = 512      # the tail may hold this many positions before any rebuild


class TokenIndex:
    def __init__(self, tokens: Sequence[int] | np.ndarray = ()) -> None:
        self.array = np.empty(0, dtype=np.int32)
        self.length = 0
        self._order = np.empty(0, dtype=np.int64)   # [bulk] positions sorted by (token, position)
        self._keys = np.empty(0, dtype=np.int32)    # [bulk] the tokens at _order
        self._bulk = 0                              # positions below this are in _order
        self._tail: dict[int, list[int]] = {}       # token -> its positions >= _bulk, ascending
        self._tail_size = 0
        if len(tokens):
            self.extend(tokens)

    @property
    def tokens(self) -> np.ndarray:
        """int32[length]: a view, valid until the next extend."""
        return self.array[:self.length]

    def extend(self, tokens: Sequence[int] | np.ndarray) -> None:
        n = len(tokens)
        if n == 0:
            return
        end = self.length + n
        if end > self.array.size:
            grown = np.empty(max(end, 2 * self.array.size, 256), dtype=np.int32)
            grown[:self.length] = self.array[:self.length]
            self.array = grown
        self.array[self.length:end] = tokens
        start, self.length = self.length, end
        if self._tail_size + n > max(_MIN_TAIL, self._bulk // 4):
            self._rebuild()
            return
        for pos in range(start, end):
            token = int(self.array[pos])
            if token >= 0:
                self._tail.setdefault(token, []).append(pos)
        self._tail_size += n

    def _rebuild(self) -> None:
        # one sort of (token << 32 | position): unique keys, so no stable sort is needed
        packed = (self.array[:self.length].astype(np.int64) << 32) | np.arange(self.length, dtype=np.int64)
        packed.sort()
        order, keys = packed & 0xFFFFFFFF, (packed >> 32).astype(np.int32)
        first = int(np.searchsorted(keys, 0))   # separators (negative) sort first: dropped
        self._order, self._keys = order[first:], keys[first:]
        self._bulk = self.length
        self._tail = {}
        self._tail_size = 0

    def positions(self, token: int) -> np.ndarray:
        """int64[c]: every position holding `token`, ascending."""
        lo = int(np.searchsorted(self._keys, token, "left"))
        hi = int(np.searchsorted(self._keys, token, "right"))
        tail = self._tail.get(token)
        if not tail:
            return self._order[lo:hi]
        return np.concatenate([self._order[lo:hi], np.asarray(tail, dtype=np.int64)])

    def truncate_front(self, start: int) -> "TokenIndex":
        """A new index over tokens [start, length) (positions shift down by `start`)."""
        return TokenIndex(self.array[start:self.length].copy())
