"""Names of KV blocks outside the device: the chained block hash, qualified by model, layout,
hash seed and tenant.

A key is equal on every worker that serves the same model with the same KV layout and hash seed
(the chained hash is, tandem/kv/block_hash.py), and differs otherwise, so a worker never loads
KV computed for another model, dtype or block size. The request's KV partition (its cache salt
and tenant: tandem/kv/block_hash.py `cache_keys`) is already folded into the chain, so another
tenant's blocks are a miss in every tier; it is named in the key as well so that one partition's
blocks can be listed or removed by prefix (and a collision would need a hash collision too).

    key = "<space>/<tenant>/<block hash, 16 hex digits>"
    space  = 16 hex digits of blake2b(layout, hash seed)
    tenant = 16 hex digits of blake2b(cache salt) for a salt alone (the keys of earlier
             versions), of blake2b(repr(partition)) for any other partition, "-" for none
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

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
        """The key's tenant part for a request's `cache_keys`."""
        if not partition:
            return NO_SALT
        if len(partition) == 1 and isinstance(partition[0], str):
            return _digest(partition[0].encode())
        return _digest(repr(partition).encode())

    def key(self, block_hash: int, tenant: str) -> str:
        return f"{self.space}/{tenant}/{block_hash:016x}"

    def keys(self, block_hashes, partition: tuple) -> list[str]:
        tenant = self.tenant(partition)
        return [f"{self.space}/{tenant}/{h:016x}" for h in block_hashes]


def block_hash_of(key: str) -> int:
    """The chained block hash a key names."""
    return int(key.rsplit("/", 1)[1], 16)


def space_of(key: str) -> str:
    return key.split("/", 1)[0]
