"""Mooncake trace replay: hash ids become fixed pseudo-random token blocks.

A Mooncake trace line is `{"timestamp": ms, "input_length": n, "output_length": m,
"hash_ids": [...]}`, one hash id per 512-token block of the prompt (the last block may be
partial). Replaying on a small machine scales every block to `tokens_per_block` tokens and
turns each hash id into a block of token ids that depends only on (seed, hash id): equal ids
give equal tokens at any position, so shared prefixes of the trace are shared prefixes on
the wire, and an engine whose KV block size divides `tokens_per_block` can hit them.

Ideal cache hits (an infinite cache that keeps every block it has seen, in tokens after
scaling): in trace order, the first occurrence of a block is a miss and every repeat is a
hit, counting min(tokens sent of it now, most tokens of it sent before) for partial blocks.
With Mooncake's chained (prefix) hash ids this equals the longest previously seen prefix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tandem.bench.vocab import TokenSpace
from tandem.bench.workload import Session, Turn, Workload, poisson_arrivals

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class TraceRecord:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class TraceConfig:
    tokens_per_block: int = 16       # tokens per hash id after scaling
    trace_block_size: int = 512      # tokens per hash id in the trace
    time_scale: float = 1.0          # multiplies every timestamp (0.1 = ten times faster)
    request_rate: float | None = None  # Poisson arrivals at this rate instead of the timestamps
    max_input_tokens: int | None = None   # clamp of the scaled prompt length
    output_scale: float = 1.0        # multiplies output_length
    max_output_tokens: int | None = None  # clamp of the scaled output length
    min_output_tokens: int = 1
    max_requests: int | None = None  # read only the first N lines
    seed: int = 0


def read_trace(path: str | Path, limit: int | None = None) -> list[TraceRecord]:
    out: list[TraceRecord] = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append(TraceRecord(float(d["timestamp"]), int(d["input_length"]),
                                       int(d["output_length"]), tuple(int(h) for h in d["hash_ids"])))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: not a Mooncake trace line ({exc})") from exc
    return out


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic)."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


class BlockTokens:
    """Token ids of hash-id blocks: a pure function of (seed, hash id, position in block)."""

    def __init__(self, space: TokenSpace, tokens_per_block: int, seed: int) -> None:
        if not 1 <= tokens_per_block < 2**20:
            raise ValueError(f"tokens_per_block must be in [1, 2^20), got {tokens_per_block}")
        self.allowed = space.allowed()
        self.tokens_per_block = tokens_per_block
        self._seed_key = _mix(np.array([seed], dtype=np.uint64))[0]

    def prompt(self, hash_ids: tuple[int, ...] | list[int], length: int) -> np.ndarray:
        """int32 [length]: blocks of `hash_ids` in order, cut to `length` tokens."""
        tpb = self.tokens_per_block
        length = min(length, len(hash_ids) * tpb)
        h = np.repeat(np.asarray(hash_ids, dtype=np.uint64), tpb)[:length]
        j = np.tile(np.arange(tpb, dtype=np.uint64), len(hash_ids))[:length]
        with np.errstate(over="ignore"):
            z = _mix((h << np.uint64(20)) + j ^ self._seed_key)
        return self.allowed[(z % np.uint64(self.allowed.size)).astype(np.int64)].astype(np.int32)


def scaled_input_length(rec: TraceRecord, cfg: TraceConfig) -> int:
    n = round(rec.input_length * cfg.tokens_per_block / cfg.trace_block_size)
    n = max(1, min(n, len(rec.hash_ids) * cfg.tokens_per_block))
    if cfg.max_input_tokens is not None:
        n = min(n, cfg.max_input_tokens)
    return n


def scaled_output_length(rec: TraceRecord, cfg: TraceConfig) -> int:
    n = max(cfg.min_output_tokens, round(rec.output_length * cfg.output_scale))
    if cfg.max_output_tokens is not None:
        n = min(n, cfg.max_output_tokens)
    return max(1, n)


def ideal_cached_tokens(records: list[TraceRecord], cfg: TraceConfig) -> list[int]:
    """Per request, in order: tokens an infinite cache would hit (see the module docstring)."""
    tpb = cfg.tokens_per_block
    seen: dict[int, int] = {}   # hash id -> most tokens of that block sent so far
    out = []
    for rec in records:
        length = scaled_input_length(rec, cfg)
        hits = 0
        for i, h in enumerate(rec.hash_ids):
            sent = min(tpb, length - i * tpb)
            if sent <= 0:
                break
            hits += min(sent, seen.get(h, 0))
            seen[h] = max(sent, seen.get(h, 0))
        out.append(hits)
    return out


def trace_workload(path: str | Path, space: TokenSpace, cfg: TraceConfig) -> Workload:
    records = read_trace(path, cfg.max_requests)
    if not records:
        raise ValueError(f"{path}: empty trace")
    blocks = BlockTokens(space, cfg.tokens_per_block, cfg.seed)
    ideal = ideal_cached_tokens(records, cfg)
    if cfg.request_rate is not None:
        arrivals = poisson_arrivals(len(records), cfg.request_rate, cfg.seed)
    else:
        t0 = records[0].timestamp_ms
        arrivals = [(r.timestamp_ms - t0) / 1000.0 * cfg.time_scale for r in records]
    sessions = []
    for i, (rec, hits, at) in enumerate(zip(records, ideal, arrivals)):
        length = scaled_input_length(rec, cfg)
        turn = Turn(request_id=f"trace-{i}", max_tokens=scaled_output_length(rec, cfg),
                    prompt_token_ids=blocks.prompt(rec.hash_ids, length),
                    expected_prompt_tokens=length, ideal_cached_tokens=hits)
        sessions.append(Session(session_id=f"trace-{i}", turns=(turn,), arrival_s=at))
    params = {"kind": "trace", "trace": str(path), **asdict(cfg),
              "token_space": {"low": space.low, "high": space.high, "excluded": len(space.excluded)}}
    return Workload(name=Path(path).stem, sessions=tuple(sessions), params=params, uses_token_ids=True)
