"""Byte-level views of the KV tensor and grouping of block ids into contiguous runs.

KV tensor: [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim], contiguous, so block b is
bytes [b * block_nbytes, (b + 1) * block_nbytes) of its storage (tandem/kv/layout.py).
"""

from __future__ import annotations

import torch

from tandem.kv.layout import KVLayout


def check_kv(kv: torch.Tensor, layout: KVLayout) -> int:
    """Validate the tensor against the layout; return its number of blocks."""
    if not kv.is_contiguous():
        raise ValueError("the KV tensor must be contiguous")
    if kv.dtype != layout.torch_dtype or tuple(kv.shape[1:]) != layout.block_shape:
        raise ValueError(f"KV tensor {tuple(kv.shape)} {kv.dtype} does not match layout "
                         f"[num_blocks, {layout.block_shape}] {layout.dtype}")
    return kv.shape[0]


def byte_view(kv: torch.Tensor) -> memoryview:
    """Flat writable byte view sharing the (CPU) tensor's memory; it keeps the tensor alive."""
    if kv.device.type != "cpu":
        raise ValueError(f"byte_view needs a CPU tensor, got {kv.device}")
    return memoryview(kv.view(-1).view(torch.uint8).numpy())


def runs(block_ids: list[int]) -> list[tuple[int, int]]:
    """[(first block, count)] covering the ids in order, merging consecutive ids: [3,4,5,9] -> [(3,3),(9,1)]."""
    out: list[tuple[int, int]] = []
    for b in block_ids:
        if out and out[-1][0] + out[-1][1] == b:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((b, 1))
    return out


def paired_runs(src: list[int], dst: list[int]) -> list[tuple[int, int, int]]:
    """[(src first, dst first, count)] where both sides are consecutive: one copy per run."""
    out: list[tuple[int, int, int]] = []
    for s, d in zip(src, dst, strict=True):
        if out and out[-1][0] + out[-1][2] == s and out[-1][1] + out[-1][2] == d:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + 1)
        else:
            out.append((s, d, 1))
    return out
