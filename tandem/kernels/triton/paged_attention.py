"""Paged attention in Triton over the dense KV cache [num_blocks, num_layers, 2, block_size, kv_heads, D],
K/V read in place through the block table (no gather, no padding to the longest context).

- decode: one program per (sequence, KV head) computes that head's whole query group, so each K/V
  tile is read once for the group (GQA); keys in tiles of BLOCK_N positions, each position's
  block looked up in the table, so any block size works;
- prefill (one sequence's chunk, its new K/V already written): one program per (BLOCK_M queries,
  head), causal over the cached context and the chunk alike, K/V tiles shared by BLOCK_M queries.
Online softmax in float32 (flash attention). The cache may store a narrower type than the queries
(float8_e5m2): K/V are widened to the queries' type as they are read, as `as_stored` does.
The classes implement the kernels' interface of tandem.layers.attention.AttentionWorkspace.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tandem.kernels.triton.runtime import CheckedKernel, dot, dot_args

BLOCK_N = 32   # keys per tile
BLOCK_M = 32   # prefill queries per program


@triton.jit
def _decode_kernel(q, cache, table, lens, out,
                   q_sb, q_sh, c_sb, c_sl, c_skv, c_st, c_sh, t_sb, o_sb, o_sh,
                   layer, scale, block_size,
                   GROUP: tl.constexpr, GROUP_P: tl.constexpr, D: tl.constexpr, D_P: tl.constexpr,
                   BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    # q [B, H, D], table [B, nb], lens [B] -> out [B, H, D]; program (b, kv head)
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    rows = tl.arange(0, GROUP_P)                       # the group's query heads, padded for tl.dot
    dims = tl.arange(0, D_P)
    row_ok = rows < GROUP
    dim_ok = dims < D
    heads = kvh * GROUP + rows
    q_tile = tl.load(q + b * q_sb + heads[:, None] * q_sh + dims[None, :],
                     mask=row_ok[:, None] & dim_ok[None, :], other=0.0)            # [GROUP_P, D_P]
    ctx = tl.load(lens + b)
    m_i = tl.full([GROUP_P], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_P], tl.float32)
    acc = tl.zeros([GROUP_P, D_P], tl.float32)
    base = cache + layer * c_sl + kvh * c_sh
    for start in range(0, ctx, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        key_ok = pos < ctx
        blk = tl.load(table + b * t_sb + pos // block_size, mask=key_ok, other=0)
        kv = base + blk * c_sb + (pos % block_size) * c_st                          # [BLOCK_N]
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(kv[:, None] + dims[None, :], mask=kv_mask, other=0.0).to(q_tile.dtype)
        v = tl.load(kv[:, None] + c_skv + dims[None, :], mask=kv_mask, other=0.0).to(q_tile.dtype)
        s = dot(q_tile, tl.trans(k), PRECISION, WIDEN) * scale                     # [GROUP_P, BLOCK_N]
        s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, PRECISION, WIDEN)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(out + b * o_sb + heads[:, None] * o_sh + dims[None, :], o.to(out.dtype.element_ty),
             mask=row_ok[:, None] & dim_ok[None, :])


@triton.jit
def _prefill_kernel(q, cache, blocks, out,
                    q_st, q_sh, c_sb, c_sl, c_skv, c_st, c_sh, o_st, o_sh,
                    layer, scale, block_size, num_new, num_computed,
                    GROUP: tl.constexpr, D: tl.constexpr, D_P: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    # q [n, H, D], blocks [nb] -> out [n, H, D]; program (query tile, head)
    tile = tl.program_id(0)
    h = tl.program_id(1)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D_P)
    row_ok = rows < num_new
    dim_ok = dims < D
    q_pos = num_computed + rows                                                     # [BLOCK_M]
    q_tile = tl.load(q + rows[:, None] * q_st + h * q_sh + dims[None, :],
                     mask=row_ok[:, None] & dim_ok[None, :], other=0.0)            # [BLOCK_M, D_P]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_P], tl.float32)
    base = cache + layer * c_sl + (h // GROUP) * c_sh
    end = num_computed + tl.minimum((tile + 1) * BLOCK_M, num_new)                 # keys the tile sees
    for start in range(0, end, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        key_ok = pos < end
        blk = tl.load(blocks + pos // block_size, mask=key_ok, other=0)
        kv = base + blk * c_sb + (pos % block_size) * c_st
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(kv[:, None] + dims[None, :], mask=kv_mask, other=0.0).to(q_tile.dtype)
        v = tl.load(kv[:, None] + c_skv + dims[None, :], mask=kv_mask, other=0.0).to(q_tile.dtype)
        s = dot(q_tile, tl.trans(k), PRECISION, WIDEN) * scale                     # [BLOCK_M, BLOCK_N]
        s = tl.where(key_ok[None, :] & (pos[None, :] <= q_pos[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, PRECISION, WIDEN)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(out + rows[:, None] * o_st + h * o_sh + dims[None, :], o.to(out.dtype.element_ty),
             mask=row_ok[:, None] & dim_ok[None, :])


class TritonPagedDecode(CheckedKernel):
    def __call__(self, q: torch.Tensor, kv_cache: torch.Tensor, layer: int, block_table: torch.Tensor,
                 context_lens: torch.Tensor, scale: float) -> torch.Tensor:
        """q [B, H, D] -> [B, H, D]; block_table LongTensor[B, nb] (row i covers sequence i's
        first context_lens[i] positions), context_lens LongTensor[B], every length >= 1."""
        B, H, D = q.shape
        bs, kvh = kv_cache.shape[3], kv_cache.shape[4]
        group = H // kvh
        out = torch.empty_like(q)
        c = kv_cache.stride()
        _decode_kernel[(B, kvh)](
            q, kv_cache, block_table, context_lens, out,
            q.stride(0), q.stride(1), c[0], c[1], c[2], c[3], c[4], block_table.stride(0),
            out.stride(0), out.stride(1), layer, scale, bs,
            GROUP=group, GROUP_P=max(16, triton.next_power_of_2(group)), D=D, D_P=triton.next_power_of_2(D),
            BLOCK_N=BLOCK_N, **dot_args(q.dtype))
        return out


class TritonPagedPrefill(CheckedKernel):
    def scratch_numel(self, kv_cache: torch.Tensor, ctx: int) -> int:
        return 0   # reads the cache in place: no packed copy

    def __call__(self, q: torch.Tensor, kv_cache: torch.Tensor, layer: int, block_ids: torch.Tensor,
                 num_computed: int, scale: float, k_scratch: torch.Tensor | None = None,
                 v_scratch: torch.Tensor | None = None) -> torch.Tensor:
        """q [n, H, D] (the chunk's queries at positions num_computed..) -> [n, H, D];
        block_ids LongTensor[nb] cover positions [0, num_computed + n)."""
        n, H, D = q.shape
        bs, kvh = kv_cache.shape[3], kv_cache.shape[4]
        out = torch.empty_like(q)
        c = kv_cache.stride()
        _prefill_kernel[(triton.cdiv(n, BLOCK_M), H)](
            q, kv_cache, block_ids, out,
            q.stride(0), q.stride(1), c[0], c[1], c[2], c[3], c[4], out.stride(0), out.stride(1),
            layer, scale, bs, n, num_computed,
            GROUP=H // kvh, D=D, D_P=triton.next_power_of_2(D), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
            **dot_args(q.dtype))
        return out
