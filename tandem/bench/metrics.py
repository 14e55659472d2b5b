"""Summary statistics of a run: percentiles, throughput, goodput under SLOs, cache hit ratios.

Pure functions of a list of RequestSample; no I/O. Conventions:
- percentiles interpolate linearly between order statistics (numpy's default "linear");
- ITL is one gap per output chunk after the first (the gap a streaming client sees), as vLLM's
  benchmark reports it; TPOT is per request, (last chunk - first chunk) / (tokens - 1);
- throughput divides by the run's duration (first send to last end), errors excluded;
- goodput counts successful requests that meet every SLO given (None = no limit).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from tandem.bench.sample import RequestSample

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLO:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met_by(self, s: RequestSample) -> bool:
        if not s.ok:
            return False
        if self.ttft_s is not None and (s.ttft is None or s.ttft > self.ttft_s):
            return False
        if self.tpot_s is not None and s.tpot is not None and s.tpot > self.tpot_s:
            return False
        if self.e2e_s is not None and s.e2e > self.e2e_s:
            return False
        return True

    @property
    def empty(self) -> bool:
        return self.ttft_s is None and self.tpot_s is None and self.e2e_s is None


@dataclass(frozen=True)
class Distribution:
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: list[float]) -> "Distribution":
        if not values:
            return cls(0, None, None, None, None, None)
        a = np.asarray(values, dtype=np.float64)
        p50, p90, p99 = (float(x) for x in np.percentile(a, PERCENTILES))
        return cls(len(values), float(a.mean()), p50, p90, p99, float(a.max()))


@dataclass(frozen=True)
class Summary:
    requests: int                 # samples in the run (sent)
    completed: int                # without error
    errors: int
    duration_s: float
    request_throughput: float     # completed requests / s
    output_throughput: float      # completion tokens / s
    total_throughput: float       # (prompt + completion tokens) / s
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None     # None when no response reported cached tokens
    ideal_cached_tokens: int
    cached_ratio: float | None    # cached / prompt tokens
    ideal_cached_ratio: float | None  # ideal cached / prompt tokens
    goodput: float | None         # requests / s meeting the SLO (None when no SLO was given)
    slo_attainment: float | None  # fraction of sent requests meeting the SLO
    ttft: Distribution
    itl: Distribution
    tpot: Distribution
    e2e: Distribution
    error_kinds: dict[str, int]

    def to_dict(self) -> dict:
        return asdict(self)


def run_duration(samples: list[RequestSample]) -> float:
    if not samples:
        return 0.0
    return max(s.end for s in samples) - min(s.start for s in samples)


def summarize(samples: list[RequestSample], slo: SLO = SLO()) -> Summary:
    ok = [s for s in samples if s.ok]
    duration = run_duration(samples)
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    prompt = sum(s.prompt_tokens for s in ok)
    completion = sum(s.completion_tokens for s in ok)
    reported = [s for s in ok if s.cached_tokens is not None]
    cached = sum(s.cached_tokens for s in reported) if reported else None
    ideal = sum(s.ideal_cached_tokens for s in ok)
    good = sum(1 for s in samples if slo.met_by(s))
    kinds: dict[str, int] = {}
    for s in samples:
        if not s.ok:
            key = _error_kind(s)
            kinds[key] = kinds.get(key, 0) + 1
    return Summary(
        requests=len(samples), completed=len(ok), errors=len(samples) - len(ok),
        duration_s=duration,
        request_throughput=per_s(len(ok)), output_throughput=per_s(completion),
        total_throughput=per_s(prompt + completion),
        prompt_tokens=prompt, completion_tokens=completion,
        cached_tokens=cached, ideal_cached_tokens=ideal,
        cached_ratio=(cached / prompt) if (cached is not None and prompt) else None,
        ideal_cached_ratio=(ideal / prompt) if prompt else None,
        goodput=None if slo.empty else per_s(good),
        slo_attainment=None if slo.empty or not samples else good / len(samples),
        ttft=Distribution.of([s.ttft for s in ok if s.ttft is not None]),
        itl=Distribution.of([g for s in ok for g in s.itl]),
        tpot=Distribution.of([s.tpot for s in ok if s.tpot is not None]),
        e2e=Distribution.of([s.e2e for s in ok]),
        error_kinds=kinds,
    )


def _error_kind(s: RequestSample) -> str:
    if s.status is not None and s.status != 200:
        return f"http {s.status}"
    return (s.error or "error").split(":", 1)[0]
