"""MLA attention in Triton, the absorbed form, over the latent cache
[num_blocks, num_layers, 1, block_size, 1, r + dr] read in place (tandem/layers/mla_attention.py
has the math: per token the latent c [r] and the RoPE key k_rot [dr], shared by every head).

Each query row attends its own context through its own block-table row: scores
q_lat . c + q_rot . k_rot over the row's first context_lens[row] positions, output the
softmax-weighted latents [r] (the caller maps them to v space with W_UV). One program per
(row, BLOCK_H heads): a latent tile is read once for BLOCK_H heads.
- decode: a row per sequence;
- prefill over a cached context: a row per new token, every row with the chunk's block table
  (an expanded view, stride 0) and its own causal length num_computed + i + 1. A latent tile is
  shared by the heads of a token, not across tokens (they meet in the GPU's cache).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tandem.kernels.triton.runtime import CheckedKernel, dot, dot_args

BLOCK_N = 32   # latents per tile
BLOCK_H = 16   # heads per program: its [BLOCK_H, r] accumulator stays in registers at r = 512


@triton.jit
def _mla_kernel(q_lat, q_rot, cache, table, lens, out,
                ql_sr, ql_sh, qr_sr, qr_sh, c_sb, c_sl, c_st, t_sr, o_sr, o_sh,
                layer, scale, block_size, H,
                R: tl.constexpr, R_P: tl.constexpr, DR: tl.constexpr, DR_P: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    # q_lat [rows, H, R], q_rot [rows, H, DR], table [rows, nb], lens [rows] -> out [rows, H, R]
    row = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = heads < H
    rd = tl.arange(0, R_P)
    pd = tl.arange(0, DR_P)
    rd_ok = rd < R
    pd_ok = pd < DR
    ql = tl.load(q_lat + row * ql_sr + heads[:, None] * ql_sh + rd[None, :],
                 mask=h_ok[:, None] & rd_ok[None, :], other=0.0)                  # [BLOCK_H, R_P]
    qr = tl.load(q_rot + row * qr_sr + heads[:, None] * qr_sh + pd[None, :],
                 mask=h_ok[:, None] & pd_ok[None, :], other=0.0)                  # [BLOCK_H, DR_P]
    ctx = tl.load(lens + row)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, R_P], tl.float32)
    base = cache + layer * c_sl
    for start in range(0, ctx, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        key_ok = pos < ctx
        blk = tl.load(table + row * t_sr + pos // block_size, mask=key_ok, other=0)
        tok = base + blk * c_sb + (pos % block_size) * c_st                         # [BLOCK_N]
        c = tl.load(tok[:, None] + rd[None, :], mask=key_ok[:, None] & rd_ok[None, :],
                    other=0.0).to(ql.dtype)                                         # [BLOCK_N, R_P]
        kr = tl.load(tok[:, None] + R + pd[None, :], mask=key_ok[:, None] & pd_ok[None, :],
                     other=0.0).to(qr.dtype)                                        # [BLOCK_N, DR_P]
        s = dot(ql, tl.trans(c), PRECISION, WIDEN) + dot(qr, tl.trans(kr), PRECISION, WIDEN)
        s = tl.where(key_ok[None, :], s * scale, float("-inf"))                    # [BLOCK_H, BLOCK_N]
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + dot(p.to(c.dtype), c, PRECISION, WIDEN)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(out + row * o_sr + heads[:, None] * o_sh + rd[None, :], o.to(out.dtype.element_ty),
             mask=h_ok[:, None] & rd_ok[None, :])


class TritonMLA(CheckedKernel):
    def __call__(self, q_lat: torch.Tensor, q_rot: torch.Tensor, kv_cache: torch.Tensor, layer: int,
                 block_table: torch.Tensor, context_lens: torch.Tensor, scale: float) -> torch.Tensor:
        """q_lat [rows, H, r], q_rot [rows, H, dr] -> latent outputs [rows, H, r]; block_table
        LongTensor[rows, nb] (rows may share one: stride 0), context_lens LongTensor[rows] >= 1."""
        rows, H, r = q_lat.shape
        dr = q_rot.shape[2]
        if kv_cache.shape[5] != r + dr:
            raise ValueError(f"MLA kernel: cache latent width {kv_cache.shape[5]} != r {r} + dr {dr}")
        out = torch.empty_like(q_lat)
        c = kv_cache.stride()
        _mla_kernel[(rows, triton.cdiv(H, BLOCK_H))](
            q_lat, q_rot, kv_cache, block_table, context_lens, out,
            q_lat.stride(0), q_lat.stride(1), q_rot.stride(0), q_rot.stride(1), c[0], c[1], c[3],
            block_table.stride(0), out.stride(0), out.stride(1), layer, scale, kv_cache.shape[3], H,
            R=r, R_P=triton.next_power_of_2(r), DR=dr, DR_P=triton.next_power_of_2(dr),
            BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N, **dot_args(q_lat.dtype))
        return out
