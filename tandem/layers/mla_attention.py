"""Paged multi-head latent attention (MLA) over a latent KV cache.

Cache: [num_blocks, num_layers, 1, block_size, 1, latent_dim] (KVLayout kind "mla"): per token
and layer the normalized KV latent c [r] followed by the RoPE key k_rot [dr], shared by every
head. Keys and values are never cached per head.

Per head h, with W_UK[h] [dn, r] and W_UV[h] [dv, r] the two halves of kv_b_proj:
  k_h = [W_UK[h] c ; k_rot]     v_h = W_UV[h] c
- decode (one new token per sequence), the absorbed form: the query moves into latent space,
  q_lat_h = W_UK[h]^T q_nope_h [r]; scores are [q_lat_h ; q_rot_h] . [c ; k_rot], i.e. one
  multi-query attention with a single KV "head" of latent_dim over the cached latents read in
  place of keys and (their first r dims) values; W_UV[h] then maps the latent output to v space.
  Reads latent_dim values per cached token instead of H * (dn + dr + dv).
- prefill chunks, the expanded form: the chunk's context latents (this step's, or gathered from
  the blocks) are expanded to per-head keys and values once and attended causally; cheaper
  than the absorbed form when many queries share the context.
With an MLA kernel in the workspace (the Triton one on a GPU), decode and every prefill chunk with a
cached context take the absorbed form through it, reading the latents in place (no gather).
Both read every latent as stored (rounded to the cache's dtype), so a token's output does not
depend on whether its context came from this step or from the cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tandem.layers.attention import AttentionWorkspace, as_stored
from tandem.layers.attention_batch import AttentionBatch, DecodeGroup, PrefillChunk
from tandem.layers.attention_kernels import MLAKernel


def write_latent(kv_cache: torch.Tensor, layer: int, latent: torch.Tensor, batch: AttentionBatch) -> None:
    # latent [T, latent_dim] -> kv_cache[slot_block, layer, 0, slot_offset, 0], rounded to the cache's type
    kv_cache[batch.slot_block_ids, layer, 0, batch.slot_offsets, 0] = latent.to(kv_cache.dtype)


def mla_paged_attention(q_nope: torch.Tensor, q_rot: torch.Tensor, latent: torch.Tensor,
                        kv_cache: torch.Tensor, layer: int, batch: AttentionBatch, scale: float,
                        kv_b_weight: torch.Tensor, v_head_dim: int, ws: AttentionWorkspace) -> torch.Tensor:
    """q_nope [T, H, dn], q_rot [T, H, dr], latent [T, r + dr] (this step's tokens);
    kv_b_weight [H * (dn + dv), r] -> [T, H, dv]."""
    write_latent(kv_cache, layer, latent, batch)
    T, H, dn = q_nope.shape
    r = kv_b_weight.shape[1]
    w = kv_b_weight.view(H, dn + v_head_dim, r)
    w_uk, w_uv = w[:, :dn], w[:, dn:]                                  # [H, dn, r], [H, dv, r]
    out = q_nope.new_empty(T, H, v_head_dim)
    for g in batch.decodes:
        rows = g.token_index
        qn, qr = q_nope.index_select(0, rows), q_rot.index_select(0, rows)
        out.index_copy_(0, rows, _decode(qn, qr, kv_cache, layer, g, scale, w_uk, w_uv, ws))
    for chunk in batch.prefills:
        s, e = chunk.token_start, chunk.token_end
        out[s:e] = _prefill(q_nope[s:e], q_rot[s:e], latent[s:e], kv_cache, layer, chunk, scale,
                            kv_b_weight, dn, v_head_dim, ws)
    return out


def _gather(kv_cache: torch.Tensor, layer: int, block_ids: torch.Tensor, dtype: torch.dtype,
            ws: AttentionWorkspace) -> torch.Tensor:
    # block_ids LongTensor[n] -> latents [n * block_size, latent_dim] in `dtype`, in block order
    n = block_ids.shape[0]
    bs, d = kv_cache.shape[3], kv_cache.shape[5]
    buf, _ = ws.kv_views((n, bs, 1, d), kv_cache)
    torch.index_select(kv_cache[:, layer, 0], 0, block_ids, out=buf)
    lat = buf.view(n * bs, d)
    return lat if lat.dtype == dtype else lat.to(dtype)


def _decode(q_nope: torch.Tensor, q_rot: torch.Tensor, kv_cache: torch.Tensor, layer: int,
            g: DecodeGroup, scale: float, w_uk: torch.Tensor, w_uv: torch.Tensor,
            ws: AttentionWorkspace) -> torch.Tensor:
    # q_nope [B, H, dn], q_rot [B, H, dr] -> [B, H, dv]
    B, H, _ = q_nope.shape
    r = w_uk.shape[2]
    q_lat = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)      # [B, H, r]
    kernel = ws.mla_kernel
    if kernel is not None and kernel.supports(q_lat, kv_cache):
        o = kernel(q_lat, q_rot, kv_cache, layer, g.block_table, g.context_lens, scale)  # [B, H, r]
    else:
        q = torch.cat((q_lat, q_rot), dim=-1).unsqueeze(1)               # [B, 1, H, r + dr]
        lat = _gather(kv_cache, layer, g.block_table.flatten(), q.dtype, ws)  # [B * nb * bs, r + dr]
        k = lat.view(B, -1, lat.shape[-1])[:, :g.max_ctx].unsqueeze(1)  # [B, 1, S, r + dr]
        o = F.scaled_dot_product_attention(q, k, k[..., :r], attn_mask=g.key_mask, scale=scale)[:, 0]
    return torch.bmm(o.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)  # [B, H, dv]


def _prefill(q_nope: torch.Tensor, q_rot: torch.Tensor, latent: torch.Tensor, kv_cache: torch.Tensor,
             layer: int, chunk: PrefillChunk, scale: float, kv_b_weight: torch.Tensor, dn: int, dv: int,
             ws: AttentionWorkspace) -> torch.Tensor:
    # q_nope [n, H, dn], q_rot [n, H, dr], latent [n, r + dr] -> [n, H, dv]
    n, H, _ = q_nope.shape
    r = kv_b_weight.shape[1]
    kernel = ws.mla_kernel
    if chunk.num_computed and kernel is not None and kernel.supports(q_nope, kv_cache):
        return _prefill_absorbed(q_nope, q_rot, kv_cache, layer, chunk, scale, kv_b_weight, dn, dv, kernel)
    if chunk.mask is None:
        ctx_lat = as_stored(latent, kv_cache)                            # [n, r + dr]
    else:
        ctx = chunk.mask.shape[1]
        ctx_lat = _gather(kv_cache, layer, chunk.block_ids, q_nope.dtype, ws)[:ctx]  # [ctx, r + dr]
    S = ctx_lat.shape[0]
    kv = F.linear(ctx_lat[:, :r], kv_b_weight).view(S, H, dn + dv)     # [S, H, dn + dv]
    k_nope, v = kv.split([dn, dv], dim=-1)
    k = torch.cat((k_nope, ctx_lat[:, r:].unsqueeze(1).expand(S, H, -1)), dim=-1)  # [S, H, dn + dr]
    q = torch.cat((q_nope, q_rot), dim=-1)                                # [n, H, dn + dr]
    # 4-D inputs (a batch of one): 3-D ones send CPU SDPA to its slow math fallback
    o = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                       v.transpose(0, 1).unsqueeze(0), attn_mask=chunk.mask,
                                       is_causal=chunk.mask is None, scale=scale)  # [1, H, n, dv]
    return o[0].transpose(0, 1)


def _prefill_absorbed(q_nope: torch.Tensor, q_rot: torch.Tensor, kv_cache: torch.Tensor, layer: int,
                      chunk: PrefillChunk, scale: float, kv_b_weight: torch.Tensor, dn: int, dv: int,
                      kernel: MLAKernel) -> torch.Tensor:
    # q_nope [n, H, dn], q_rot [n, H, dr] -> [n, H, dv]: a kernel row per new token, each over the
    # chunk's blocks up to its own position (the chunk's latents are already in the cache)
    n, H, _ = q_nope.shape
    w = kv_b_weight.view(H, dn + dv, -1)
    w_uk, w_uv = w[:, :dn], w[:, dn:]                                    # [H, dn, r], [H, dv, r]
    q_lat = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)      # [n, H, r]
    table = chunk.block_ids.unsqueeze(0).expand(n, -1)                   # [n, nb], stride 0
    lens = torch.arange(chunk.num_computed + 1, chunk.num_computed + n + 1, device=table.device)  # [n]
    o = kernel(q_lat, q_rot.contiguous(), kv_cache, layer, table, lens, scale)    # [n, H, r]
    return torch.bmm(o.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)  # [n, H, dv]
