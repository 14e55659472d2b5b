"""What a simulated run measured: latencies, cache hits against the trace's ideal, throughput.

Definitions follow `tandem bench serve` (docs/benchmarks.md, "How we measure"): TTFT is arrival
at the gateway to the first token; ITL every gap between consecutive tokens of a request (here
one token per gap); TPOT per request (last token - first) / (tokens - 1); percentiles are numpy's linear interpolation; the cached ratio is prompt
tokens served from a cache (device, host tier or shared store) over prompt tokens.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tandem.sim.request import SimRequest


def pct(values, q: float) -> float | None:
    return float(np.percentile(np.asarray(values), q)) if len(values) else None


@dataclass
class Metrics:
    ttft_t: array = field(default_factory=lambda: array("d"))   # when each first token came
    ttft: array = field(default_factory=lambda: array("d"))     # seconds
    itl_t: array = field(default_factory=lambda: array("d"))
    itl: array = field(default_factory=lambda: array("d"))
    finished: list[SimRequest] = field(default_factory=list)
    placements: Counter = field(default_factory=Counter)
    decisions: Counter = field(default_factory=Counter)
    outstanding: int = 0
    retries: int = 0
    on_done: Callable[[SimRequest, float], None] | None = None   # the fleet's closed-loop turns

    def first(self, req: SimRequest, t: float) -> None:
        req.first_token = req.last_token = t
        req.tokens = 1
        self.ttft_t.append(t)
        self.ttft.append(t - req.arrival)

    def token(self, req: SimRequest, t: float) -> None:
        assert req.last_token is not None
        self.itl_t.append(t)
        self.itl.append(t - req.last_token)
        req.last_token = t
        req.tokens += 1

    def done(self, req: SimRequest, t: float) -> None:
        req.finished = t
        self.finished.append(req)
        self.outstanding -= 1
        if self.on_done is not None:
            self.on_done(req, t)

    def summary(self, requests: tuple[SimRequest, ...], ideal_hit_tokens: int) -> dict:
        ms = lambda v: None if v is None else round(v * 1000.0, 2)  # noqa: E731
        ok = [r for r in self.finished if r.rejected is None]
        served = [r for r in requests if r.first_token is not None]
        prompt = sum(r.prompt_tokens for r in requests)
        cached = sum(r.cached_tokens for r in served)
        tiers: Counter = Counter()
        for r in served:
            tiers.update(r.cached_by_tier)
        start = min((r.arrival for r in requests), default=0.0)
        end = max((r.finished for r in self.finished if r.finished is not None), default=start)
        span = max(end - start, 1e-9)
        out_tokens = sum(r.tokens for r in ok)
        e2e = [r.finished - r.arrival for r in ok]
        tpot = [(r.last_token - r.first_token) / (r.tokens - 1) for r in ok
                if r.tokens > 1 and r.first_token is not None and r.last_token is not None]
        return {
            "requests": len(requests), "completed": len(ok),
            "rejected": sum(1 for r in self.finished if r.rejected is not None),
            "lost": len(requests) - len(self.finished), "gateway_retries": self.retries,
            "ttft_ms": {f"p{q}": ms(pct(self.ttft, q)) for q in (50, 90, 99)},
            "itl_ms": {f"p{q}": ms(pct(self.itl, q)) for q in (50, 90, 99)},
            "tpot_ms": {f"p{q}": ms(pct(tpot, q)) for q in (50, 90, 99)},
            "e2e_ms": {f"p{q}": ms(pct(e2e, q)) for q in (50, 90, 99)},
            "throughput": {"requests_per_s": round(len(ok) / span, 3),
                           "output_tokens_per_s": round(out_tokens / span, 1),
                           "prompt_tokens_per_s": round(sum(r.prompt_tokens for r in ok) / span, 1),
                           "makespan_s": round(span, 2)},
            "cache": {"hit_ratio": round(cached / prompt, 4) if prompt else 0.0,
                      "ideal_hit_ratio": round(ideal_hit_tokens / prompt, 4) if prompt else 0.0,
                      "of_ideal": round(cached / ideal_hit_tokens, 4) if ideal_hit_tokens else None,
                      "by_tier": {k: round(v / prompt, 4) for k, v in sorted(tiers.items())} if prompt else {}},
            "routes": dict(Counter(r.route for r in served)),
            "placement": dict(self.placements),
            "decisions": dict(self.decisions),
        }
