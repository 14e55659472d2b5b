"""Chained hashes of full KV blocks: pure, seeded, equal on every process and host.

hash(block i) = H(seed, hash(block i-1), tokens of block i, extra keys of block i).
Only full blocks are hashed. The tenant's cache salt is an extra key of the first
block, so it flows into every later hash through the chain: two tenants with
different salts never share a block, and equal salts (or none) share equal prefixes.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

_NO_PARENT = b"\x00" * 8


def hash_block_tokens(parent: int | None, tokens: Sequence[int],
                      extra_keys: tuple = (), seed: int = 0) -> int:
    """The 64-bit hash of one full block given its parent's hash (None for the first)."""
    h = hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    h.update(_NO_PARENT if parent is None else parent.to_bytes(8, "little"))
    h.update(array("q", tokens).tobytes())
    if extra_keys:
        h.update(repr(extra_keys).encode())
    return int.from_bytes(h.digest(), "little")


def hash_request_blocks(token_ids: Sequence[int], block_size: int, cache_salt: str | None = None,
                        seed: int = 0, start: int = 0,
                        parent: int | None = None) -> list[int]:
    """Hashes of the full blocks of `token_ids` from block index `start` on.

    `parent` is the hash of block `start - 1` (None when start == 0), so callers can extend
    an already-hashed prefix as tokens arrive without rehashing it. Equal to chaining
    hash_block_tokens, with the token bytes made once for all blocks.
    """
    end = len(token_ids) // block_size
    if start >= end:
        return []
    keyed = hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    data = array("q", token_ids[start * block_size:end * block_size]).tobytes()
    step = block_size * 8
    hashes: list[int] = []
    parent_bytes = _NO_PARENT if parent is None else parent.to_bytes(8, "little")
    for n, i in enumerate(range(start, end)):
        h = keyed.copy()  # cheaper than keying a new one
        h.update(parent_bytes)
        h.update(data[n * step:(n + 1) * step])
        if i == 0 and cache_salt:
            h.update(repr((cache_salt,)).encode())
        parent_bytes = h.digest()
        hashes.append(int.from_bytes(parent_bytes, "little"))
    return hashes
