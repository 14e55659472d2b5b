"""CUDA graphs of decode steps: which batch sizes are captured, which bucket a step replays, and
whether graphs can run at all (pure functions; the mechanism is tandem/runner/cuda_graphs.py).

A graph replays fixed kernels on fixed buffers, so a decode step's forward can be one only when
nothing in it depends on the step beyond tensor contents: attention kernels that read each row's
block table and context length on the device (the Triton kernels; torch SDPA's path pads to the
step's longest context, a shape) and MoE experts without the host in the loop (the Triton
grouped GEMMs; the loop over experts reads the routing back). A step of B rows replays the
smallest captured size >= B, padded; a larger step runs eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

AUTO_MAX = 512   # "auto" captures up to min(max_num_seqs, this)


def capture_sizes(requested: Sequence[str | int], max_num_seqs: int) -> tuple[int, ...]:
    """`--cuda-graph-sizes`: sizes, or "auto" (1, 2, 4, then every multiple of 8 up to
    min(max_num_seqs, 512), as vLLM's default) -> sorted distinct sizes. ValueError on a size < 1."""
    if list(requested) == ["auto"]:
        top = min(max_num_seqs, AUTO_MAX)
        return tuple(s for s in (1, 2, 4, *range(8, top + 1, 8)) if s <= top) or (1,)
    sizes = set()
    for item in requested:
        size = int(item) if str(item).isdigit() else 0
        if size < 1:
            raise ValueError(f"a CUDA graph size must be a positive batch size (or 'auto' alone), got {item!r}")
        sizes.add(size)
    return tuple(sorted(sizes))


def bucket(sizes: Sequence[int], rows: int) -> int | None:
    """The captured size a step of `rows` decode rows replays (sizes sorted); None: run eagerly."""
    for size in sizes:
        if size >= rows:
            return size
    return None


def unusable_reason(device: torch.device, num_ranks: int, attention_graph_safe: bool,
                    moe_graph_safe: bool) -> str | None:
    """Why a model's decode steps cannot be captured; None when they can."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device; this worker computes on {device}"
    if num_ranks > 1:
        return f"a worker of {num_ranks} ranks would need a graph per rank, replayed together (not done yet)"
    if not attention_graph_safe:
        return "the attention kernels pad each step to its longest context; graphs need --attention triton"
    if not moe_graph_safe:
        return "the MoE layers loop over experts on the host; graphs need --moe-kernel triton"
    return None
