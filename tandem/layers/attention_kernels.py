"""The interface of the attention kernels an AttentionWorkspace carries (tandem/layers/attention.py
calls them; tandem.kernels implements them: the native CPU kernels, the Triton GPU kernels).

`supports(q, kv_cache)` is asked on every call; False sends that call to torch SDPA. The kernels
read the cache in place: the new tokens' K/V (or latents) are written before they are called.
`graph_safe`: a call depends on the step only through tensor contents (each row's block table
and context length read on the device), so a CUDA graph can replay it (tandem/runner/cuda_graphs.py).
"""

from __future__ import annotations

from typing import Protocol

import torch


class DecodeKernel(Protocol):
    graph_safe: bool

    def supports(self, q: torch.Tensor, kv_cache: torch.Tensor) -> bool: ...

    def __call__(self, q: torch.Tensor, kv_cache: torch.Tensor, layer: int, block_table: torch.Tensor,
                 context_lens: torch.Tensor, scale: float) -> torch.Tensor:
        """q [B, H, D] -> [B, H, D]; block_table LongTensor[B, nb], context_lens LongTensor[B]."""
        ...


class PrefillKernel(Protocol):
    def supports(self, q: torch.Tensor, kv_cache: torch.Tensor) -> bool: ...

    def scratch_numel(self, kv_cache: torch.Tensor, ctx: int) -> int:
        """Elements of each of the two scratch buffers a call over `ctx` positions needs."""
        ...

    def __call__(self, q: torch.Tensor, kv_cache: torch.Tensor, layer: int, block_ids: torch.Tensor,
                 num_computed: int, scale: float, k_scratch: torch.Tensor,
                 v_scratch: torch.Tensor) -> torch.Tensor:
        """q [n, H, D] at positions num_computed.. -> [n, H, D]; block_ids LongTensor[nb]."""
        ...


class MLAKernel(Protocol):
    graph_safe: bool

    def supports(self, q: torch.Tensor, kv_cache: torch.Tensor) -> bool: ...

    def __call__(self, q_lat: torch.Tensor, q_rot: torch.Tensor, kv_cache: torch.Tensor, layer: int,
                 block_table: torch.Tensor, context_lens: torch.Tensor, scale: float) -> torch.Tensor:
        """The absorbed form: q_lat [rows, H, r], q_rot [rows, H, dr] -> latent outputs [rows, H, r];
        block_table LongTensor[rows, nb] (rows may share one), context_lens LongTensor[rows]."""
        ...
