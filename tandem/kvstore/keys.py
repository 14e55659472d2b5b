"""Names of KV blocks outside the device: the chained block hash, qualified by model, layout,
hash seed and tenant.

A key is equal on every worker that serves the same model with the same KV layout and hash seed
(the chained hash is, tandem/kv/block_hash.py), and differs otherwise, so a worker never loads
KV computed for another model, dtype or block size. The tenant's cache salt is already folded
into the chain; it is named in the key as well so that one tenant's blocks can be listed or
removed by prefix (and a salt collision would need a hash collision too).

    key = "<space>/<tenant>/<block hash, 16 hex digits>"
    space  = 16 hex digits of blake2b(layout, hash seed)
    tenant = 16 hex digits of blake2b(cache salt), or "-" without a salt
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
    def tenant(cache_salt: str | None) -> str:
        return NO_SALT if not cache_salt else _digest(cache_salt.encode())

    def key(self, block_hash: int, tenant: str) -> str:
        return f"{self.space}/{tenant}/{block_hash:016x}"

    def keys(self, block_hashes, cache_salt: str | None) -> list[str]:
        tenant = self.tenant(cache_salt)
        return [f"{self.space}/{tenant}/{h:016x}" for h in block_hashes]


def block_hash_of(key: str) -> int:
    """The chained block hash a key names."""
    return int(key.rsplit("/", 1)[1], 16)


def space_of(key: str) -> str:
    return key.split("/", 1)[0]
