"""Names of KV blocks outside the device: the chained block hash, qualified by model, layout,
hash seed and tenant.

A key is equal on every worker that serves the same model with the same KV layout and hash seed
(the chained hash is, tandem/kv/block_hash.py), and differs otherwise, so a worker never loads
KV computed for another model, dtype or block size. The request's KV partition (its cache salt
and tenant: tandem/kv/block_hash.py `cache_keys`) is already folded into the chain, so another
tenant's blocks are a miss in every tier; it is named in the key as well so that one partition's
blocks can be listed or removed by prefix (and a collision would need a hash collision too).
A block inside an operator-declared shared prefix (before its partition's split) is named by
the keys its chain took in, the salt alone, so every tenant finds it under one key.

    key = "<space>/<tenant>/<block hash, 16 hex digits>"
    space  = 16 hex digits of blake2b(layout, hash seed)
    tenant = 16 hex digits of blake2b(cache salt) for a salt alone (the keys of earlier
             versions), of blake2b(repr(partition)) for any other partition, "-" for none
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from tandem.kv.block_hash import Partition, as_partition
from tandem.kv.layout import KVLayout

NO_SALT = "-"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


@dataclass(frozen=True)
class KeySpace:
    """Keys of one model and KV layout. `space` is also what a value's header must name."""

    space: str

    @classmethod
    def of(cls, layout: KVLayout, hash_seed: int) -> "KeySpace":
        ident = json.dumps({"layout": layout.to_dict(), "hash_seed": hash_seed}, sort_keys=True)
        return cls(_digest(ident.encode()))

    @staticmethod
    def tenant(partition: tuple) -> str:
        """The key's tenant part for the keys a block's chain took in (Partition.chain_keys)."""
        if not partition:
            return NO_SALT
        if len(partition) == 1 and isinstance(partition[0], str):
            return _digest(partition[0].encode())
        return _digest(repr(partition).encode())

    def key(self, block_hash: int, tenant: str) -> str:
        return f"{self.space}/{tenant}/{block_hash:016x}"

    def keys(self, block_hashes, partition: Partition | tuple, block_size: int,
             start: int = 0) -> list[str]:
        """Keys of blocks start, start + 1, ... with these hashes, of a request's `cache_keys`."""
        part = as_partition(partition)
        split = part.split(block_size)
        shared, own = (self.tenant(part.chain_keys(b, block_size)) for b in (0, split))
        return [f"{self.space}/{own if start + i >= split else shared}/{h:016x}"
                for i, h in enumerate(block_hashes)]


def block_hash_of(key: str) -> int:
    """The chained block hash a key names."""
    return int(key.rsplit("/", 1)[1], 16)


def space_of(key: str) -> str:
    return key.split("/", 1)[0]
