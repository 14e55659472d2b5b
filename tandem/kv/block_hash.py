"""Chained hashes of full KV blocks: pure, seeded, equal on every process and host.

hash(block i) = H(seed, hash(block i-1), tokens of block i, extra keys of block i).
Only full blocks are hashed. A request's cache partition (`cache_keys`: its cache salt and its
tenant, a `Partition`) gives the extra keys, which flow into every later hash through the chain:
two requests share a block only when the keys their chains took in up to it are equal.

The partition, exactly (`cache_keys(context)`; the keys of block 0 when nothing is shared):
    ()                                  no salt, no tenant (a server without API keys)
    (salt,)                             vLLM's `cache_salt` only
    (("tenant", tenant),)               the API key's tenant only
    (salt, ("tenant", tenant))          both
A request with `share_prefix_cache` (the operator's `--share-prefix-cache`) leaves the tenant
out, as before tenants were hashed: tenants then share equal prefixes unless they salt them.
Without API keys there is no tenant, so every hash is what it was before tenants existed.

Operator-declared shared prefixes (`--shared-prefixes`, tandem/kv/shared_prefixes.py): a request
whose first `shared_tokens` tokens lie inside a declared prefix has the salt as block 0's keys
and the tenant as the keys of block `split` (`Partition.split`: the leading blocks whose tokens
all lie inside the shared tokens). Blocks before the split are the same for every tenant (their
tokens are public by declaration); every block from the split on is the tenant's, as before. A
split of 0 gives block 0 both, so the hashes equal the table's.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.types import RequestContext

_NO_PARENT = b"\x00" * 8


@dataclass(frozen=True)
class Partition:
    """Which extra keys a request's block hashes carry, and at which block (the module's rule)."""

    first: tuple = ()        # block 0's keys: the cache salt, or nothing
    tenant: tuple = ()       # the tenant's keys, or nothing (no tenant, or prefixes shared)
    shared_tokens: int = 0   # leading tokens inside an operator-declared shared prefix

    def split(self, block_size: int, span: int | None = None) -> int:
        """Leading blocks hashed without the tenant: blocks b whose rows' tokens
        [b * block_size, b * block_size + span) all lie inside the shared tokens. `span` is what
        one block's rows depend on: block_size for a KV cache, one more for the EAGLE-3 head's."""
        span = block_size if span is None else span
        if not self.tenant or self.shared_tokens < span:
            return 0
        return (self.shared_tokens - span) // block_size + 1

    def keys_at(self, block: int, block_size: int, span: int | None = None) -> tuple:
        """The extra keys of block `block` (what `hash_block_tokens` takes)."""
        keys = self.first if block == 0 else ()
        if self.tenant and block == self.split(block_size, span):
            keys += self.tenant
        return keys

    def chain_keys(self, block: int, block_size: int) -> tuple:
        """All keys block `block`'s hash took in through its chain: its partition's name."""
        return self.first + (self.tenant if block >= self.split(block_size) else ())


def as_partition(keys: Partition | tuple) -> Partition:
    """A Partition, or a bare tuple meaning block 0's extra keys (nothing shared)."""
    return keys if isinstance(keys, Partition) else Partition(first=tuple(keys))


def cache_keys(context: RequestContext) -> Partition:
    """A request's KV partition (see the module's table and the shared-prefix rule)."""
    first: tuple = (context.cache_salt,) if context.cache_salt else ()
    if context.tenant is None or context.share_prefix_cache:
        return Partition(first)
    return Partition(first, (("tenant", context.tenant),), context.shared_prefix_tokens)


def hash_block_tokens(parent: int | None, tokens: Sequence[int],
                      extra_keys: tuple = (), seed: int = 0) -> int:
    """The 64-bit hash of one full block given its parent's hash (None for the first)."""
    h = hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    h.update(_NO_PARENT if parent is None else parent.to_bytes(8, "little"))
    h.update(array("q", tokens).tobytes())
    if extra_keys:
        h.update(repr(extra_keys).encode())
    return int.from_bytes(h.digest(), "little")


def hash_request_blocks(token_ids: Sequence[int], block_size: int,
                        extra_keys: Partition | tuple = (), seed: int = 0, start: int = 0,
                        parent: int | None = None) -> list[int]:
    """Hashes of the full blocks of `token_ids` from block index `start` on; `extra_keys`: the
    request's partition (`cache_keys` of its context), or a tuple of block 0's keys.

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
    part = as_partition(extra_keys)
    split = part.split(block_size)
    keyed_at = {i: repr(k).encode() for i in {0, split} if (k := part.keys_at(i, block_size))}
    for n, i in enumerate(range(start, end)):
        h = keyed.copy()  # cheaper than keying a new one
        h.update(parent_bytes)
        h.update(data[n * step:(n + 1) * step])
        if i in keyed_at:
            h.update(keyed_at[i])
        parent_bytes = h.digest()
        hashes.append(int.from_bytes(parent_bytes, "little"))
    return hashes
