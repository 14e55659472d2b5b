"""Prefixes an operator declares shared by every tenant (`--shared-prefixes`), as token ids, and
how far a prompt lies inside one.

A prompt's shared tokens are its longest common prefix with any declared prefix: a prompt that
starts with a whole declared prefix shares all of it, one that leaves it at token t shares its
first t tokens, one that starts elsewhere shares none. The hashers share only the whole blocks
within them (tandem/kv/block_hash.py `Partition.split`), so every block that holds a token past
the shared tokens, the tenant's own text included, stays the tenant's. A declared prefix is
public to every tenant by definition: a tenant can time whether its blocks are cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_CHUNK = 256   # tokens compared at once (a slice comparison runs in C)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n:
        j = min(i + _CHUNK, n)
        if tuple(a[i:j]) == tuple(b[i:j]):
            i = j
            continue
        while a[i] == b[i]:   # a mismatch lies in [i, j)
            i += 1
        return i
    return n


@dataclass(frozen=True)
class SharedPrefixes:
    """The declared prefixes, resolved to token ids (empty: nothing is shared)."""

    prefixes: tuple[tuple[int, ...], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.prefixes)

    def match(self, token_ids: Sequence[int]) -> int:
        """Leading tokens of `token_ids` inside a declared prefix (at most len(token_ids))."""
        return max((common_prefix(p, token_ids) for p in self.prefixes), default=0)
