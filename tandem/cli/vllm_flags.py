"""vLLM `serve` flags that `tandem serve` also takes, so that a vLLM command line starts tandem
unchanged, each with what it means here. (vLLM's flags that tandem shares under the same name,
--max-model-len, --gpu-memory-utilization, --speculative-config and the like, are tandem's own.)
"""

from __future__ import annotations

import argparse


def add_vllm_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=None,
                   help="seed torch's random generator at start-up, as vLLM does: requests without a "
                        "seed of their own then sample reproducibly for the same requests in the same order")
    p.add_argument("--enable-prefix-caching", dest="enable_prefix_caching", default=None,
                   action=argparse.BooleanOptionalAction,
                   help="prefix caching is on by default; --no-enable-prefix-caching is --no-prefix-caching")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="accepted for vLLM compatibility: tandem runs its own code for the architectures "
                        "it supports and never imports a checkpoint's Python files")
    p.add_argument("--enforce-eager", action="store_true",
                   help="no CUDA graphs, whatever --cuda-graph-sizes says: every step runs eagerly (as vLLM's)")
    p.add_argument("--enable-prompt-tokens-details", action="store_true",
                   help="accepted for vLLM compatibility: usage always reports "
                        "prompt_tokens_details.cached_tokens")
    p.add_argument("--disable-log-requests", "--disable-log-stats", action="store_true",
                   help="accepted for vLLM compatibility: tandem logs no requests (unless --access-log) "
                        "and no periodic statistics (see /metrics)")


def prefix_caching(args: argparse.Namespace) -> bool:
    """--no-prefix-caching, or vLLM's --no-enable-prefix-caching, turns prefix caching off."""
    return not args.no_prefix_caching and args.enable_prefix_caching is not False
