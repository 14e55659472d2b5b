"""How many KV blocks a worker allocates.

In order of precedence:
- `CacheConfig.num_blocks` (--num-kv-blocks): that many;
- `CacheConfig.kv_cache_bytes` (--kv-cache-memory): as many blocks as fit in it;
- on a GPU, `CacheConfig.gpu_memory_utilization` (--gpu-memory-utilization, vLLM's meaning): the
  worker may use that share of the GPU's total memory, weights and activations included, so the
  cache gets the share minus what the process already holds (its weights, a draft model's) minus
  the activation peak of one step of max_num_batched_tokens prompt tokens, measured once by a
  forward over a scratch cache. A draft model or EAGLE head sizes its own cache by the target's
  block count before its memory can be measured, so with one the target's count is first taken
  from half of what is left (enough for a draft as large as the target), then lowered to what
  the draft leaves: set --kv-cache-memory to give a small draft's target more;
- on the CPU: CPU_KV_CACHE_BYTES.
"""

from __future__ import annotations

import torch

from tandem.config import CPU_KV_CACHE_BYTES, EngineConfig
from tandem.kv.layout import KVLayout
from tandem.layers.attention_batch import AttentionBatch, SeqSlice

_GIB = 2**30


def blocks_in_share(total_bytes: int, free_bytes: int, in_use_bytes: int, activation_bytes: int,
                    utilization: float, block_nbytes: int) -> int:
    """Whole blocks of `block_nbytes` in `utilization` x total, less what this process holds and
    the activation peak, and never more than the device has free (other processes' memory) less
    the activation peak; raises ValueError with the figures when not even two fit."""
    room = min(int(utilization * total_bytes) - in_use_bytes, free_bytes) - activation_bytes
    n = max(0, room // block_nbytes)
    if n < 2:
        raise ValueError(
            f"no room for the KV cache: --gpu-memory-utilization {utilization} of {total_bytes / _GIB:.1f} "
            f"GiB is {utilization * total_bytes / _GIB:.2f} GiB ({free_bytes / _GIB:.2f} GiB free), the weights "
            f"and other memory of this process take {in_use_bytes / _GIB:.2f} GiB and a step's activations "
            f"{activation_bytes / _GIB:.2f} GiB; "
            f"raise --gpu-memory-utilization, lower --max-num-batched-tokens, or set --kv-cache-memory")
    return n


def activation_peak(model: torch.nn.Module, layout: KVLayout, num_tokens: int, vocab_size: int,
                    device: torch.device) -> int:
    """Bytes a forward of one `num_tokens`-token prompt chunk allocates beyond what is held before
    it (its scratch cache included), on a CUDA device."""

    num_blocks = -(-num_tokens // layout.block_size)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    scratch = layout.allocate(num_blocks, device)
    ids = torch.randint(0, vocab_size, (num_tokens,), device=device)
    positions = torch.arange(num_tokens, device=device)
    batch = AttentionBatch.build([SeqSlice(list(range(num_blocks)), 0, num_tokens)], layout.block_size, device)
    with torch.inference_mode():
        hidden = model(ids, positions, batch, scratch)
        model.compute_logits(hidden[-1:])
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del scratch, hidden
    torch.cuda.empty_cache()
    return peak


class KVBudget:
    """The block count of one engine's cache (see the module's rules). On a GPU the activation
    peak is measured at the first `num_blocks` call; later calls (after a draft model has been
    loaded, say) measure only what is in use then."""

    def __init__(self, config: EngineConfig, model: torch.nn.Module, vocab_size: int, max_model_len: int) -> None:
        self.config = config
        self.model = model
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self._activations: int | None = None

    def num_blocks(self, layout: KVLayout, draft_to_come: bool = False) -> int:
        """`draft_to_come`: a draft's cache of as many tokens will take memory too (the module's rule)."""
        cache = self.config.cache
        if cache.num_blocks:
            return cache.num_blocks
        if cache.kv_cache_bytes is not None:
            return cache.kv_cache_bytes // layout.block_nbytes
        device = torch.device(self.config.model.device)
        if device.type != "cuda":
            return CPU_KV_CACHE_BYTES // layout.block_nbytes
        if self._activations is None:
            tokens = max(1, min(self.config.scheduler.max_num_batched_tokens, self.max_model_len))
            self._activations = activation_peak(self.model, layout, tokens, self.vocab_size, device)
        free, total = torch.cuda.mem_get_info(device)
        return blocks_in_share(total, free, torch.cuda.memory_allocated(device), self._activations,
                               cache.gpu_memory_utilization, layout.block_nbytes * (2 if draft_to_come else 1))
