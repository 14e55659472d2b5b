"""The tiers' counters as EngineStats.kv_tier_stats (types.py: KV_TIERS x KV_TIER_COUNTERS)."""

from __future__ import annotations

from tandem.kvstore.stack import TierStack
from tandem.types import KV_TIER_COUNTERS, KV_TIERS


def kv_tier_stats(stack: TierStack) -> tuple[float, ...]:
    """One value per (tier, counter), tier-major; zeros for a tier the stack does not have."""
    out: list[float] = []
    for name in KV_TIERS:
        tier = stack.get(name)
        if tier is None:
            out.extend([0] * len(KV_TIER_COUNTERS))
            continue
        values = tier.snapshot()
        values.update(used_bytes=tier.used_bytes, capacity_bytes=tier.capacity_bytes,
                      available=int(tier.available))
        out.extend(values[c] for c in KV_TIER_COUNTERS)
    return tuple(out)


def by_tier(stats: tuple[float, ...]) -> dict[str, dict[str, float]]:
    """kv_tier_stats back as {tier: {counter: value}} ({} when empty)."""
    if not stats:
        return {}
    n = len(KV_TIER_COUNTERS)
    return {tier: dict(zip(KV_TIER_COUNTERS, stats[i * n:(i + 1) * n])) for i, tier in enumerate(KV_TIERS)}
