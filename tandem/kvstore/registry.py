"""The KV tiers below the device, by name: the table the tier factory (factory.py) reads.

Each entry builds its tier from the EngineConfig, or returns None when the config does not ask
for it. The order is the stack's, fastest first: a load reads from the first tier that holds a
block. A name is also the tier's `Tier.name` and its label in the engine's stats (types.py:
KV_TIERS).

Adding a tier: its file, with a Tier subclass and a `(config, ctx) -> Tier | None` factory, plus
one line below (and its settings in KVStoreConfig, its flags in the CLI, its name in KV_TIERS).
"""

from __future__ import annotations

from collections.abc import Callable

from tandem.config import EngineConfig
from tandem.kvstore.disk import disk_tier
from tandem.kvstore.host import host_tier
from tandem.kvstore.mooncake_store import store_tier
from tandem.kvstore.tier import Tier, TierContext

TierFactory = Callable[[EngineConfig, TierContext], Tier | None]

TIERS: dict[str, TierFactory] = {
    "host": host_tier,
    "disk": disk_tier,
    "store": store_tier,
}
