"""Hardware profiles for `tandem up --profile NAME`: presets of the prefill:decode split, the
scheduler's chunk and batch limits and the parallel layout, tuned per traffic shape.

- input-heavy: agentic traffic (long resent prompts, short outputs, often tool calls): more
  prefill workers than decode workers, large prefill chunks (prefill is compute-bound and
  chunks amortize the weights), a chunk cap that still lets a short tool result through.
- output-heavy: long generations: more decode workers, many sequences per step (decode is
  memory-bound: batching reads the weights once for every stream), small prefill chunks so
  that a new prompt never stalls the streams long.
- balanced: one of each, the engine's defaults.
A profile fills --prefill/--decode when neither they nor --colocated are given, and its worker
flags come before --worker-arg's (so that an explicit flag wins).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    prefill: int                        # workers per role when the command names none
    decode: int
    max_num_batched_tokens: int         # a step's token budget
    max_num_seqs: int                   # sequences running at once per worker
    long_prefill_token_threshold: int   # one prompt's share of a step while others wait
    tensor_parallel_size: int = 1       # ranks per worker (GPUs: the devices one worker spans)

    def worker_args(self) -> tuple[str, ...]:
        args = (f"--max-num-batched-tokens={self.max_num_batched_tokens}",
                f"--max-num-seqs={self.max_num_seqs}",
                f"--long-prefill-token-threshold={self.long_prefill_token_threshold}")
        if self.tensor_parallel_size > 1:
            args += (f"--tensor-parallel-size={self.tensor_parallel_size}",)
        return args


PROFILES = {p.name: p for p in (
    Profile("input-heavy", prefill=2, decode=1, max_num_batched_tokens=2048, max_num_seqs=32,
            long_prefill_token_threshold=512),
    Profile("output-heavy", prefill=1, decode=2, max_num_batched_tokens=512, max_num_seqs=128,
            long_prefill_token_threshold=128),
    Profile("balanced", prefill=1, decode=1, max_num_batched_tokens=512, max_num_seqs=64,
            long_prefill_token_threshold=256),
)}


def apply_profile(args: argparse.Namespace) -> None:
    """Fill `tandem up`'s arguments from args.profile (None: nothing to do)."""
    if args.profile is None:
        return
    p = PROFILES[args.profile]
    if args.colocated is None and args.prefill is None and args.decode is None:
        args.prefill, args.decode = p.prefill, p.decode
    args.worker_arg = [*p.worker_args(), *args.worker_arg]
