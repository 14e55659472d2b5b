"""Hardware profiles for `tandem up --profile NAME`: presets of the prefill:decode split and, per
role, the scheduler's chunk and batch limits and the worker's parallel layout, tuned per traffic
shape.

- input-heavy: agentic traffic (long resent prompts, short outputs, often tool calls): more
  prefill workers than decode workers; prefill workers take large chunks (prefill is
  compute-bound and chunks amortize the weights) and span 2 ranks (tensor parallel: a long
  prompt's time to first token is split over two devices' compute); decode workers stay on one
  rank with a chunk cap that still lets a short local remainder through.
- output-heavy: long generations: more decode workers, many sequences per step (decode is
  memory-bound: batching reads the weights once for every stream), small prefill chunks so
  that a new prompt never stalls the streams long; decode workers span 2 ranks (each rank reads
  half the weights per token: lower inter-token latency).
- balanced: one of each, the engine's defaults, one rank each.
A profile fills --prefill/--decode when neither they nor --colocated are given; each worker gets
its role's flags before --worker-arg's (so that an explicit flag wins). A colocated (role both)
worker takes the decode settings: it streams while it prefills. A worker spanning N ranks needs N
devices (or N cores on the CPU): `tandem up` gives each worker its share of the cores, and the
ranks of a worker split that share.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSettings:
    max_num_batched_tokens: int         # a step's token budget
    max_num_seqs: int                   # sequences running at once per worker
    long_prefill_token_threshold: int   # one prompt's share of a step while others wait
    tensor_parallel_size: int = 1       # ranks per worker (GPUs: the devices one worker spans)

    def serve_args(self) -> tuple[str, ...]:
        args = (f"--max-num-batched-tokens={self.max_num_batched_tokens}",
                f"--max-num-seqs={self.max_num_seqs}",
                f"--long-prefill-token-threshold={self.long_prefill_token_threshold}")
        if self.tensor_parallel_size > 1:
            args += (f"--tensor-parallel-size={self.tensor_parallel_size}",)
        return args


@dataclass(frozen=True)
class Profile:
    name: str
    prefill: int                        # workers per role when the command names none
    decode: int
    prefill_worker: WorkerSettings
    decode_worker: WorkerSettings       # also a colocated (role both) worker's

    def role_args(self) -> dict[str, tuple[str, ...]]:
        """`tandem serve` flags per worker role."""
        return {"prefill": self.prefill_worker.serve_args(),
                "decode": self.decode_worker.serve_args(),
                "both": self.decode_worker.serve_args()}


PROFILES = {p.name: p for p in (
    Profile("input-heavy", prefill=2, decode=1,
            prefill_worker=WorkerSettings(max_num_batched_tokens=2048, max_num_seqs=32,
                                          long_prefill_token_threshold=512, tensor_parallel_size=2),
            decode_worker=WorkerSettings(max_num_batched_tokens=1024, max_num_seqs=64,
                                         long_prefill_token_threshold=256)),
    Profile("output-heavy", prefill=1, decode=2,
            prefill_worker=WorkerSettings(max_num_batched_tokens=1024, max_num_seqs=32,
                                          long_prefill_token_threshold=256),
            decode_worker=WorkerSettings(max_num_batched_tokens=512, max_num_seqs=128,
                                         long_prefill_token_threshold=128, tensor_parallel_size=2)),
    Profile("balanced", prefill=1, decode=1,
            prefill_worker=WorkerSettings(max_num_batched_tokens=512, max_num_seqs=64,
                                          long_prefill_token_threshold=256),
            decode_worker=WorkerSettings(max_num_batched_tokens=512, max_num_seqs=64,
                                         long_prefill_token_threshold=256)),
)}


def apply_profile(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """Fill `tandem up`'s worker split from args.profile; returns the `tandem serve` flags per
    role (empty without a profile)."""
    if args.profile is None:
        return {}
    p = PROFILES[args.profile]
    if args.colocated is None and args.prefill is None and args.decode is None:
        args.prefill, args.decode = p.prefill, p.decode
    return p.role_args()
