"""Paged attention over the KV cache tensor [num_blocks, num_layers, 2, block_size, kv_heads, D].

Per layer and step: write the new tokens' K/V at their slots, then attend.
- decode group on the CPU with the native kernel (tandem.kernels.paged_decode, when the workspace
  has one): K/V read in place from the blocks, no gather, no padding;
- decode group otherwise (one new token per sequence, similar context lengths): gather each sequence's
  blocks into a padded [B, kv_heads, S, D] and run one SDPA call with a key-padding mask; the query heads that share
  a KV head are laid out as that head's query rows ([B, kv_heads, group, D]), so K/V are never
  repeated per query head.
- prefill chunk on the CPU in bfloat16 with the AMX kernel (tandem.kernels.paged_prefill, when
  the workspace has one): K/V read from the blocks and packed once per call, causal flash attention
  by tile multiplies, over the cached context and this step's tokens alike;
- prefill chunk otherwise, without cached context: causal SDPA straight on this step's K/V (no gather);
- prefill chunk otherwise, with cached context: gather its blocks, SDPA with the chunk's causal mask.
The cache may store a narrower type than the model computes in (CacheConfig.kv_cache_dtype):
K/V are rounded to it when written, and every path reads them back widened (`as_stored`).
Gathers write into an AttentionWorkspace (buffers reused by every layer and step): on the CPU a
fresh multi-megabyte tensor per layer costs more in page faults than the copy itself
(benchmarks/attention_cpu.py).
Device-agnostic: only indexing and torch SDPA, shapes fixed by AttentionBatch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tandem.layers.attention_batch import AttentionBatch, DecodeGroup, PrefillChunk
from tandem.layers.attention_kernels import DecodeKernel, MLAKernel, PrefillKernel


class AttentionWorkspace:
    """Two flat gather buffers (K and V), grown to the largest request and then reused, and the
    kernels the model runs with (tandem/layers/attention_kernels.py; None: torch SDPA): native
    CPU ones or Triton's.

    Invariant: a view handed out is valid until the next `kv_views` call; each layer finishes
    its attention call before the next gather.
    """

    def __init__(self, decode_kernel: DecodeKernel | None = None,
                 prefill_kernel: PrefillKernel | None = None,
                 mla_kernel: MLAKernel | None = None) -> None:
        self._bufs: list[torch.Tensor | None] = [None, None]
        self.decode_kernel = decode_kernel
        self.prefill_kernel = prefill_kernel
        self.mla_kernel = mla_kernel   # MLA models' decode and prefill over a cached context

    def kv_views(self, shape: tuple[int, ...], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        numel = 1
        for d in shape:
            numel *= d
        views = []
        for i, buf in enumerate(self._bufs):
            if buf is None or buf.numel() < numel or buf.dtype != like.dtype or buf.device != like.device:
                buf = torch.empty(numel, dtype=like.dtype, device=like.device)
                self._bufs[i] = buf
            views.append(buf[:numel].view(shape))
        return views[0], views[1]


def write_kv(kv_cache: torch.Tensor, layer: int, k: torch.Tensor, v: torch.Tensor,
             batch: AttentionBatch) -> None:
    # k, v [T, KVH, D] -> kv_cache[slot_block, layer, 0|1, slot_offset] = [KVH, D], rounded to
    # the cache's storage type
    kv_cache[batch.slot_block_ids, layer, 0, batch.slot_offsets] = k.to(kv_cache.dtype)
    kv_cache[batch.slot_block_ids, layer, 1, batch.slot_offsets] = v.to(kv_cache.dtype)


def as_stored(x: torch.Tensor, kv_cache: torch.Tensor) -> torch.Tensor:
    """x as attention reads it back from the cache: rounded through the storage type when that
    is narrower than the model's (an 8-bit cache), unchanged otherwise. Every attention path
    reads K/V so, so that a token's output does not depend on whether its keys came from this
    step or from the cache (chunking, prefix hits, a KV transfer)."""
    return x if kv_cache.dtype == x.dtype else x.to(kv_cache.dtype).to(x.dtype)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                    layer: int, batch: AttentionBatch, scale: float,
                    workspace: AttentionWorkspace) -> torch.Tensor:
    """q [T, H, D], k/v [T, KVH, D] (this step's tokens) -> [T, H, D]."""
    write_kv(kv_cache, layer, k, v, batch)
    ws = workspace
    if len(batch.decodes) == 1 and not batch.prefills and batch.decodes[0].token_range is not None:
        return _decode(q, kv_cache, layer, batch.decodes[0], scale, ws)  # pure decode step
    out = torch.empty_like(q)
    for g in batch.decodes:
        if g.token_range is not None:
            s, e = g.token_range
            out[s:e] = _decode(q[s:e], kv_cache, layer, g, scale, ws)
        else:
            out.index_copy_(0, g.token_index,
                            _decode(q.index_select(0, g.token_index), kv_cache, layer, g, scale, ws))
    for chunk in batch.prefills:
        s, e = chunk.token_start, chunk.token_end
        out[s:e] = _prefill(q[s:e], k[s:e], v[s:e], kv_cache, layer, chunk, scale, ws)
    return out


def _gather(kv_cache: torch.Tensor, layer: int, block_ids: torch.Tensor,
            ws: AttentionWorkspace) -> tuple[torch.Tensor, torch.Tensor]:
    # block_ids LongTensor[n] -> K, V [n * block_size, KVH, D]: copies of those blocks, in order
    n = block_ids.shape[0]
    bs, kvh, d = kv_cache.shape[3:]
    k, v = ws.kv_views((n, bs, kvh, d), kv_cache)
    torch.index_select(kv_cache[:, layer, 0], 0, block_ids, out=k)
    torch.index_select(kv_cache[:, layer, 1], 0, block_ids, out=v)
    return k.view(n * bs, kvh, d), v.view(n * bs, kvh, d)


def _gather_as(dtype: torch.dtype, kv_cache: torch.Tensor, layer: int, block_ids: torch.Tensor,
               ws: AttentionWorkspace) -> tuple[torch.Tensor, torch.Tensor]:
    # _gather, widened to the model's dtype when the cache stores a narrower type
    k, v = _gather(kv_cache, layer, block_ids, ws)
    return (k, v) if k.dtype == dtype else (k.to(dtype), v.to(dtype))


def _decode(q: torch.Tensor, kv_cache: torch.Tensor, layer: int, g: DecodeGroup,
            scale: float, ws: AttentionWorkspace) -> torch.Tensor:
    # q [B, H, D] -> [B, H, D]
    kernel = ws.decode_kernel
    if kernel is not None and kernel.supports(q, kv_cache):
        return kernel(q, kv_cache, layer, g.block_table, g.context_lens, scale)
    B, H, D = q.shape
    kvh = kv_cache.shape[4]
    # [B * nb * bs, KVH, D] -> [B, nb * bs, KVH, D] -> [B, S=max_ctx, KVH, D] -> [B, KVH, S, D]
    k, v = _gather_as(q.dtype, kv_cache, layer, g.block_table.flatten(), ws)
    k = k.view(B, -1, kvh, D)[:, :g.max_ctx].transpose(1, 2)
    v = v.view(B, -1, kvh, D)[:, :g.max_ctx].transpose(1, 2)
    qg = q.view(B, kvh, H // kvh, D)                                    # [B, KVH, group, D]
    o = F.scaled_dot_product_attention(qg, k, v, attn_mask=g.key_mask, scale=scale)  # [B, KVH, group, D]
    return o.reshape(B, H, D)


def _prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, layer: int,
             chunk: PrefillChunk, scale: float, ws: AttentionWorkspace) -> torch.Tensor:
    # q [n, H, D], k/v [n, KVH, D] -> [n, H, D]
    n, H, D = q.shape
    kernel = ws.prefill_kernel
    if kernel is not None and kernel.supports(q, kv_cache):
        ctx = chunk.num_computed + n
        k_scratch, v_scratch = ws.kv_views((kernel.scratch_numel(kv_cache, ctx),), q)  # packed as q's dtype
        return kernel(q, kv_cache, layer, chunk.block_ids, chunk.num_computed, scale, k_scratch, v_scratch)
    kvh = k.shape[1]
    # 4-D inputs (a batch of one): 3-D ones send CPU SDPA to its slow math fallback
    qt = q.transpose(0, 1).unsqueeze(0)                                 # [1, H, n, D]
    if chunk.mask is None:
        k, v = as_stored(k, kv_cache), as_stored(v, kv_cache)
        o = F.scaled_dot_product_attention(qt, k.transpose(0, 1).unsqueeze(0),
                                           v.transpose(0, 1).unsqueeze(0), is_causal=True,
                                           scale=scale, enable_gqa=kvh != H)
    else:
        ctx = chunk.mask.shape[1]
        kc, vc = _gather_as(q.dtype, kv_cache, layer, chunk.block_ids, ws)
        kc = kc[:ctx].transpose(0, 1).unsqueeze(0)                      # [1, KVH, ctx, D]
        vc = vc[:ctx].transpose(0, 1).unsqueeze(0)
        o = F.scaled_dot_product_attention(qt, kc, vc, attn_mask=chunk.mask, scale=scale,
                                           enable_gqa=kvh != H)
    return o[0].transpose(0, 1)                                         # [n, H, D]
