"""The physical layout of a worker's KV cache, and the one tensor that holds it.

Layout: one tensor of shape [num_blocks, num_layers, parts, block_size, num_kv_heads, head_dim].
Kind "mha" (every dense model): parts = 2 (key, value). Kind "mla" (multi-head latent attention,
DeepSeek-V3 / Kimi K2): parts = 1, num_kv_heads = 1 and head_dim = kv_lora_rank + qk_rope_head_dim,
the latent and RoPE key each token caches. A block is one contiguous run of `block_nbytes`
bytes, so a transfer or a store moves a block with a single (pointer, size) pair, whatever the kind.
"""

from __future__ import annotations

import mmap
from dataclasses import asdict, dataclass

import torch

from tandem.errors import KVLayoutMismatch


@dataclass(frozen=True)
class KVLayout:
    model: str          # the model's identity (architecture and shape), not its path
    dtype: str          # torch dtype name, e.g. "bfloat16"
    block_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kind: str = "mha"   # mha: keys and values per KV head | mla: one latent per token

    KINDS = ("mha", "mla")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"KV layout kind {self.kind!r}: one of {', '.join(self.KINDS)}")

    @property
    def parts(self) -> int:
        """Tensors per token and layer: key and value (mha), or the latent alone (mla)."""
        return 2 if self.kind == "mha" else 1

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def block_shape(self) -> tuple[int, ...]:
        return (self.num_layers, self.parts, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def block_nbytes(self) -> int:
        n = 1
        for d in self.block_shape:
            n *= d
        return n * torch.empty((), dtype=self.torch_dtype).element_size()

    def allocate(self, num_blocks: int, device: str | torch.device = "cpu") -> torch.Tensor:
        """A zero-filled KV tensor. Zeros matter: attention reads padding blocks under a mask,
        and 0 * NaN garbage would still be NaN. On the CPU the memory is an anonymous mapping,
        which the kernel zero-fills page by page on first touch, so a large cache costs nothing
        at start-up (torch.zeros would write every byte before the first request)."""
        shape = (num_blocks, *self.block_shape)
        if torch.device(device).type != "cpu":
            return torch.zeros(shape, dtype=self.torch_dtype, device=device)
        nbytes = num_blocks * self.block_nbytes
        if nbytes == 0:
            return torch.zeros(shape, dtype=self.torch_dtype)
        # the tensor keeps the mapping alive (torch.frombuffer holds a reference to it)
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        return torch.frombuffer(buf, dtype=self.torch_dtype).view(shape)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "KVLayout":
        # a layout written before kinds existed is a dense ("mha") one
        return cls(**{k: d.get(k, "mha") if k == "kind" else d[k] for k in cls.__dataclass_fields__})

    def check_compatible(self, other: "KVLayout") -> None:
        """Raise KVLayoutMismatch naming every field that differs."""
        diffs = [f"{k}: {getattr(self, k)!r} here vs {getattr(other, k)!r} there"
                 for k in self.__dataclass_fields__ if getattr(self, k) != getattr(other, k)]
        if diffs:
            raise KVLayoutMismatch("KV layouts differ, refusing to transfer: " + "; ".join(diffs))
