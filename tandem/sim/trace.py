"""Mooncake traces (../shared/traces/README.md) as simulated requests, with sessions and the ideal
hit ratio.

A line is `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`; hash ids are the
prompt's 512-token blocks (equal ids at equal positions: a shared prefix). Full-size replay keeps
every length; `length_scale` multiplies input and output lengths and the block size alike (0.03125
makes 512-token blocks 16 tokens, as `tandem bench serve --tokens-per-block 16` does); `speed`
divides the timestamps (2.0: twice the trace's rate).

Sessions: the traces carry none, so a request continues the session of the most recent earlier
request whose last full block it contains at the same position (the next turn of a conversation
resends the previous turn's whole prompt); otherwise it starts a new session. A request sharing
only a system prompt with another (whose last full block is deeper) is not joined to it.

Ideal hits (the bench's definition): in trace order, the first occurrence of a block is a miss and
every repeat a hit, counted in the block's tokens; no cache can do better.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tandem.sim.request import SimRequest

TRACE_BLOCK = 512


@dataclass(frozen=True)
class TraceOptions:
    speed: float = 1.0             # arrival rate multiplier
    length_scale: float = 1.0      # token lengths (and block size) multiplier
    output_scale: float = 1.0      # extra multiplier on output lengths
    max_requests: int | None = None
    start_s: float = 0.0           # skip requests before this trace time
    duration_s: float | None = None  # stop after this much trace time


@dataclass(frozen=True)
class Trace:
    requests: tuple[SimRequest, ...]
    block_size: int
    ideal_hit_tokens: int
    prompt_tokens: int
    sessions: int

    @property
    def ideal_hit_ratio(self) -> float:
        return self.ideal_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def make_trace(requests: list[SimRequest], block_size: int) -> Trace:
    """A trace from requests already built (the calibration's measured workload, tandem/sim/
    agentic.py): ideal hits in order; a request's `output_hashes` count as seen after it."""
    seen: set[int] = set()
    ideal = total = 0
    for r in requests:
        for b, h in enumerate(r.block_hashes):
            tokens = max(0, min(block_size, r.prompt_tokens - b * block_size))
            total += tokens
            ideal += tokens if h in seen else 0
            seen.add(h)
        seen.update(r.output_hashes)   # cached where it was decoded, for the next turn
    return Trace(tuple(requests), block_size, ideal, total, len({r.session_id for r in requests}))


def block_size_for(length_scale: float) -> int:
    return max(1, round(TRACE_BLOCK * length_scale))


def load_trace(path: str | Path, opts: TraceOptions = TraceOptions()) -> Trace:
    bs = block_size_for(opts.length_scale)
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    rows.sort(key=lambda r: r["timestamp"])   # stable: the file's order breaks ties
    t0 = opts.start_s * 1000.0
    rows = [r for r in rows if r["timestamp"] >= t0 and
            (opts.duration_s is None or r["timestamp"] < t0 + opts.duration_s * 1000.0)]
    if opts.max_requests is not None:
        rows = rows[:opts.max_requests]
    requests = []
    last_block: dict[tuple[int, int], str] = {}   # (position, hash of a request's last full block) -> session
    seen: set[int] = set()
    ideal = total = sessions = 0
    for i, r in enumerate(rows):
        hashes = tuple(int(h) for h in r["hash_ids"])
        n_in = max(1, round(r["input_length"] * opts.length_scale))
        n_out = max(1, round(r["output_length"] * opts.length_scale * opts.output_scale))
        n_in = min(n_in, len(hashes) * bs) if hashes else n_in   # never more tokens than blocks hold
        session = None
        for pos in range(len(hashes) - 1, 0, -1):
            session = last_block.get((pos, hashes[pos]))
            if session is not None:
                break
        if session is None:
            sessions += 1
            session = f"s{sessions}"
        full = n_in // bs
        if full > 0:
            last_block[(full - 1, hashes[full - 1])] = session
        for b, h in enumerate(hashes):
            tokens = max(0, min(bs, n_in - b * bs))
            total += tokens
            if h in seen:
                ideal += tokens
            seen.add(h)
        requests.append(SimRequest(f"r{i}", (r["timestamp"] - t0) / 1000.0 / opts.speed, n_in, n_out,
                                   hashes, session))
    return Trace(tuple(requests), bs, ideal, total, sessions)
