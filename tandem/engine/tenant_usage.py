"""What each tenant has lately taken of an engine, in tokens: the scheduler's order among tenants.

A tenant's usage is the tokens scheduled for its requests (prompt chunks and decodes), decayed
exponentially with a half-life: about what it took over the last `half_life_s / ln 2` seconds.
That is the gateway's measure of fairness (its queue is fair by tokens, not by requests): a
tenant sending ten times the tokens of another counts ten times the usage even when both have
as many requests running on this worker.

The scheduler compares tenants by class, not by raw usage: `usage_class` is the binary
logarithm of usage in steps' budgets, so tenants within about 2x of each other share a class and
keep their arrival order, and a class changes rarely (the waiting queue is sorted again only
when a class does).

Invariant: at most one entry per tenant seen within the last ~20 half-lives; entries decayed below
one token are dropped, so the map stays as small as the set of recent tenants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class TenantUsage:
    half_life_s: float = 10.0
    _usage: dict[str | None, tuple[float, float]] = field(default_factory=dict)  # tokens, as of time

    def __post_init__(self) -> None:
        if not self.half_life_s > 0:
            raise ValueError(f"half_life_s must be positive, got {self.half_life_s}")

    def charge(self, tenant: str | None, tokens: int, now: float) -> None:
        self._usage[tenant] = (self.of(tenant, now) + tokens, now)

    def of(self, tenant: str | None, now: float) -> float:
        tokens, at = self._usage.get(tenant, (0.0, now))
        return tokens * 0.5 ** (max(0.0, now - at) / self.half_life_s)

    def tenants(self) -> list[str | None]:
        return list(self._usage)

    def prune(self, now: float) -> None:
        for tenant in [t for t in self._usage if self.of(t, now) < 1.0]:
            del self._usage[tenant]


def usage_class(tokens: float, step_tokens: int) -> int:
    """0 for under one step's budget, then one more per doubling."""
    return int(math.log2(1.0 + tokens / max(1, step_tokens)))
