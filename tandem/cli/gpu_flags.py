"""`tandem serve`'s flags for the GPU's fast paths: the MoE kernel and CUDA graphs of decode steps
(--attention triton is with the other attention choices), read into ModelConfig here.

A Triton kernel asked for on the CPU is a usage error unless Triton's interpreter is on
(TRITON_INTERPRET=1, for tests: numpy, very slow); where a GPU cannot run what was asked
(dtype, capability, several ranks), the model falls back with one warning naming why.
"""

from __future__ import annotations

import argparse
import os

from tandem.models.triton_choice import MOE_KERNELS
from tandem.runner.graph_policy import capture_sizes


def add_gpu_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--moe-kernel", choices=MOE_KERNELS, default="loop",
                   help="MoE models' experts: loop = one expert at a time (torch ops); triton = two "
                        "grouped GEMMs over all experts (CUDA; the loop where it cannot run, with a warning)")
    p.add_argument("--cuda-graph-sizes", nargs="+", default=None, metavar="N|auto",
                   help="decode batch sizes captured as CUDA graphs at start-up (a step is padded up to "
                        "the next size; larger steps run eagerly); auto = 1 2 4 8 16 ... up to "
                        "--max-num-seqs (at most 512). Needs CUDA, --attention triton and, for MoE "
                        "models, --moe-kernel triton; off by default and with --enforce-eager")


def gpu_settings(args: argparse.Namespace, device: str) -> dict:
    """ModelConfig's moe_kernel, cuda_graph_sizes and enforce_eager from the flags; SystemExit
    (a usage error) for a Triton kernel on the CPU without Triton's interpreter or a bad size."""
    triton_asked = [flag for flag, value in (("--attention", args.attention), ("--moe-kernel", args.moe_kernel))
                    if value == "triton"]
    if triton_asked and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit(f"tandem serve: {' and '.join(triton_asked)} triton: the Triton kernels run on "
                         f"CUDA devices; on the CPU only under Triton's interpreter (TRITON_INTERPRET=1, "
                         f"for tests). Use --device cuda, or leave the default kernels")
    try:
        sizes = capture_sizes(args.cuda_graph_sizes, args.max_num_seqs) if args.cuda_graph_sizes else ()
    except ValueError as exc:
        raise SystemExit(f"tandem serve: --cuda-graph-sizes: {exc}") from None
    return {"moe_kernel": args.moe_kernel, "cuda_graph_sizes": sizes, "enforce_eager": args.enforce_eager}
