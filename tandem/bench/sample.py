"""What one benchmark request measured: the unit every report is computed from.

Times are seconds. `start` is relative to the start of the run (one clock for all requests);
`chunk_times` are relative to the request's own start, one per SSE chunk that carried output,
and `chunk_tokens` says how many tokens each of those chunks carried (a chunk may carry several
tokens, e.g. with speculative decoding or when a server batches its writes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestSample:
    request_id: str
    session_id: str | None = None
    tenant: str | None = None
    turn: int = 0
    start: float = 0.0                    # s since the run started, when the request was sent
    end: float = 0.0                      # s since the run started, when the stream ended
    chunk_times: list[float] = field(default_factory=list)   # s since `start`, one per output chunk
    chunk_tokens: list[int] = field(default_factory=list)    # tokens in each output chunk
    # s since `start` of the first chunk with text; with continuous usage stats the first chunk
    # may carry tokens without text (a special token), and then this comes later than ttft
    first_text: float | None = None
    prompt_tokens: int = 0                # from usage; the planned length when usage is missing
    completion_tokens: int = 0            # from usage; else the sum of chunk_tokens
    cached_tokens: int | None = None      # usage.prompt_tokens_details.cached_tokens (None: not reported)
    expected_prompt_tokens: int = 0       # what the workload planned to send
    expected_output_tokens: int = 0       # max_tokens sent
    ideal_cached_tokens: int = 0          # prompt tokens an infinite prefix cache would hit
    finish_reason: str | None = None
    status: int | None = None             # HTTP status (None: no response at all)
    error: str | None = None              # None means the request succeeded
    headers: dict[str, str] = field(default_factory=dict)  # x-tandem-* routing headers, if any

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def itl(self) -> list[float]:
        """Gaps between consecutive output chunks (one per chunk after the first)."""
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first: (e2e - ttft) / (tokens - 1)."""
        if self.ttft is None or self.completion_tokens < 2:
            return None
        last = self.chunk_times[-1]
        return (last - self.ttft) / (self.completion_tokens - 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["chunk_times"] = [round(t, 6) for t in self.chunk_times]
        d["start"] = round(self.start, 6)
        d["end"] = round(self.end, 6)
        # derived values, written for readers of the JSON; from_dict ignores them
        d["ttft"] = None if self.ttft is None else round(self.ttft, 6)
        d["e2e"] = round(self.e2e, 6)
        d["tpot"] = None if self.tpot is None else round(self.tpot, 6)
        d["itl"] = [round(g, 6) for g in self.itl]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RequestSample":
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in d.items() if k in names})
