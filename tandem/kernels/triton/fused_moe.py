"""A mixture-of-experts MLP as two grouped GEMMs in Triton, in place of a Python loop over experts.

Each expert is a gated SiLU MLP, down(silu(gate(x)) * up(x)), its weights stacked over the
experts: w13 [E, 2I, hidden] (gate rows, then up rows) and w2 [E, hidden, I]. A token's k
choices are "pairs"; the layout (moe_align.py) sorts them by expert in BLOCK_M-row tiles.
1. gate/up: per (tile, BLOCK_N columns of I), x's rows of the tile's pairs times the tile's
   expert's gate and up weights, SiLU(gate) * up -> act [rows, I] (never the [rows, 2I] product);
2. down: act times the expert's w2, times the pair's routing weight -> per-pair outputs [T * k,
   hidden] in float32, summed over each token's k pairs.
Accumulation in float32; pairs of a choice this rank does not hold (expert id -1) add nothing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tandem.kernels.triton.moe_align import align
from tandem.kernels.triton.runtime import DTYPES, dot, dot_args

BLOCK_N = 64
BLOCK_K = 32


@triton.jit
def _gate_up_kernel(x, w13, pair_ids, tile_expert, act,
                    x_st, w_se, w_sn, a_sr, num_pairs, hidden, inter,
                    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    # x [T, hidden], w13 [E, 2I, hidden] -> act [rows, I]; program (tile, column block)
    tile = tl.program_id(0)
    e = tl.load(tile_expert + tile)
    if e < 0:
        return                                          # a tile past the last expert's run
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(pair_ids + rows)
    row_ok = pairs < num_pairs                          # padding rows compute zeros, unread
    tokens = pairs // TOP_K
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < inter
    w = w13 + e * w_se
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < hidden
        a = tl.load(x + tokens[:, None] * x_st + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & col_ok[None, :]
        wg = tl.load(w + cols[None, :] * w_sn + ks[:, None], mask=w_mask, other=0.0)            # [BK, BN]
        wu = tl.load(w + (inter + cols[None, :]) * w_sn + ks[:, None], mask=w_mask, other=0.0)  # [BK, BN]
        acc_g += dot(a, wg, PRECISION, WIDEN)
        acc_u += dot(a, wu, PRECISION, WIDEN)
    h = acc_g * tl.sigmoid(acc_g) * acc_u                                                       # [BM, BN]
    tl.store(act + rows[:, None] * a_sr + cols[None, :], h.to(act.dtype.element_ty), mask=col_ok[None, :])


@triton.jit
def _down_kernel(act, w2, pair_ids, tile_expert, weights, out,
                 a_sr, w_se, w_sn, o_sr, num_pairs, hidden, inter,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    # act [rows, I], w2 [E, hidden, I], weights [T * k] float32 -> out [T * k, hidden] float32
    tile = tl.program_id(0)
    e = tl.load(tile_expert + tile)
    if e < 0:
        return
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(pair_ids + rows)
    row_ok = pairs < num_pairs
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < hidden
    w = w2 + e * w_se
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < inter
        a = tl.load(act + rows[:, None] * a_sr + ks[None, :], mask=k_ok[None, :], other=0.0)     # [BM, BK]
        b = tl.load(w + cols[None, :] * w_sn + ks[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc += dot(a, b, PRECISION, WIDEN)
    acc *= tl.load(weights + pairs, mask=row_ok, other=0.0)[:, None]
    tl.store(out + pairs[:, None] * o_sr + cols[None, :], acc, mask=row_ok[:, None] & col_ok[None, :])


class TritonFusedMoE:
    """The experts of a SparseMoE (tandem/layers/moe.py) in two launches, and the layout's torch
    ops: no host synchronisation (graph-safe)."""

    graph_safe = True

    def supports(self, x: torch.Tensor, w13: torch.Tensor) -> bool:
        return x.dtype in DTYPES and w13.dtype == x.dtype and x.device == w13.device

    def __call__(self, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
                 expert_ids: torch.Tensor) -> torch.Tensor:
        """x [T, hidden], w13 [E, 2I, hidden], w2 [E, hidden, I], weights [T, k] float32,
        expert_ids LongTensor[T, k] (indices into w13/w2; -1 skips the choice) -> [T, hidden]."""
        T, hidden = x.shape
        E, two_i, _ = w13.shape
        inter = two_i // 2
        k = expert_ids.shape[1]
        x = x.contiguous()
        block_m = 16 if T * k <= 64 else 64
        layout = align(expert_ids, E, block_m)
        rows = layout.pair_ids.shape[0]
        act = x.new_empty(rows, inter)
        out = torch.zeros(T * k, hidden, dtype=torch.float32, device=x.device)
        tiles = rows // block_m
        args = dot_args(x.dtype)
        _gate_up_kernel[(tiles, triton.cdiv(inter, BLOCK_N))](
            x, w13, layout.pair_ids, layout.tile_expert, act,
            x.stride(0), w13.stride(0), w13.stride(1), act.stride(0), T * k, hidden, inter,
            TOP_K=k, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, **args)
        _down_kernel[(tiles, triton.cdiv(hidden, BLOCK_N))](
            act, w2, layout.pair_ids, layout.tile_expert, weights.float().contiguous().view(-1), out,
            act.stride(0), w2.stride(0), w2.stride(1), out.stride(0), T * k, hidden, inter,
            BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, **args)
        return out.view(T, k, hidden).sum(dim=1).to(x.dtype)
