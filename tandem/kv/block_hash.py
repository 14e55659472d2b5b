"""Chained hashes of full KV blocks: pure, seeded, equal on every process and host.

hash(block i) = H(seed, hash(block i-1), tokens of block i, extra keys of block i).
Only full blocks are hashed. A request's cache partition (`cache_keys`: its cache salt and its
tenant) is the extra keys of the first block, so it flows into every later hash through the
chain: two requests share a block only when their partitions are equal.

The partition, exactly (`cache_keys(context)`):
    ()                                  no salt, no tenant (a server without API keys)
    (salt,)                             vLLM's `cache_salt` only
    (("tenant", tenant),)               the API key's tenant only
    (salt, ("tenant", tenant))          both
A request with `share_prefix_cache` (the operator's `--share-prefix-cache`) leaves the tenant
out, as before tenants were hashed: tenants then share equal prefixes unless they salt them.
Without API keys there is no tenant, so every hash is what it was before tenants existed.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

from tandem.types import RequestContext

_NO_PARENT = b"\x00" * 8


def cache_keys(context: RequestContext) -> tuple:
    """The extra keys of a request's first block: its KV partition (see the module's table)."""
    keys: tuple = (context.cache_salt,) if context.cache_salt else ()
    if context.tenant is not None and not context.share_prefix_cache:
        keys += (("tenant", context.tenant),)
    return keys


def hash_block_tokens(parent: int | None, tokens: Sequence[int],
                      extra_keys: tuple = (), seed: int = 0) -> int:
    """The 64-bit hash of one full block given its parent's hash (None for the first)."""
    h = hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    h.update(_NO_PARENT if parent is None else parent.to_bytes(8, "little"))
    h.update(array("q", tokens).tobytes())
    if extra_keys:
        h.update(repr(extra_keys).encode())
    return int.from_bytes(h.digest(), "little")


def hash_request_blocks(token_ids: Sequence[int], block_size: int, extra_keys: tuple = (),
                        seed: int = 0, start: int = 0,
                        parent: int | None = None) -> list[int]:
    """Hashes of the full blocks of `token_ids` from block index `start` on; `extra_keys` are
    the first block's (`cache_keys` of the request's context).

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
    first_keys = repr(extra_keys).encode() if extra_keys else b""
    for n, i in enumerate(range(start, end)):
        h = keyed.copy()  # cheaper than keying a new one
        h.update(parent_bytes)
        h.update(data[n * step:(n + 1) * step])
        if i == 0 and first_keys:
            h.update(first_keys)
        parent_bytes = h.digest()
        hashes.append(int.from_bytes(parent_bytes, "little"))
    return hashes
