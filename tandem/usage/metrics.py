"""Usage counters by account on /metrics. Each app counts what it recorded itself (a request's
entry counts on the gateway whose recording inserted it), so summing over a cluster's gateways
gives the ledger's totals since they started. One series per account and model: fine for
hundreds of accounts; the ledger (GET .../ai/usage) is the place for many more."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from tandem.usage.pricing import TokenUsage


class UsageMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("tandem:usage_requests", "Requests recorded in the usage ledger.",
                                ("account", "model"), registry=registry)
        self.tokens = Counter("tandem:usage_tokens", "Tokens recorded in the usage ledger, by kind "
                              "(input_uncached, input_cached, output).",
                              ("account", "model", "kind"), registry=registry)
        self.cost = Counter("tandem:usage_cost_usd", "Cost of the recorded tokens (--pricing).",
                            ("account", "model"), registry=registry)
        self.limited = Counter("tandem:rate_limited_requests", "Requests refused by a rate limit "
                               "(kind: interactive or batch).", ("account", "model", "kind"),
                               registry=registry)
        self.store_errors = Counter("tandem:usage_store_errors", "Failed calls to the usage store "
                                    "(admitted without a limit, or not recorded).", ("op",),
                                    registry=registry)

    def recorded(self, account: str, model: str, usage: TokenUsage, cost: float | None) -> None:
        self.requests.labels(account, model).inc()
        for kind, n in (("input_uncached", usage.input_uncached),
                        ("input_cached", usage.input_cached), ("output", usage.output)):
            if n:
                self.tokens.labels(account, model, kind).inc(n)
        if cost:
            self.cost.labels(account, model).inc(cost)
