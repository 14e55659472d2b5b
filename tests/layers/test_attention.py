"""Paged attention equals dense causal attention per sequence, and writes K/V at the right slots."""

from __future__ import annotations

import pytest
import torch

from tandem.kernels.paged_decode import PagedDecodeKernel
from tandem.layers.attention import AttentionWorkspace, paged_attention
from tandem.layers.attention_batch import AttentionBatch, SeqSlice


def dense_reference(q, k, v, scale):
    # q [n, H, D], k/v [n_ctx, KVH, D], queries are the last n positions of the context
    n, H, _ = q.shape
    ctx, kvh, _ = k.shape
    k = k.repeat_interleave(H // kvh, dim=1)
    v = v.repeat_interleave(H // kvh, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k.double()) * scale
    q_pos = torch.arange(ctx - n, ctx).unsqueeze(1)
    scores = scores.masked_fill(torch.arange(ctx).unsqueeze(0) > q_pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.double())


def _workspace(kind: str) -> AttentionWorkspace:
    return AttentionWorkspace(PagedDecodeKernel.load() if kind == "native" else None)


@pytest.mark.parametrize("decode", ["sdpa", "native"])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 4), (6, 1)])
def test_mixed_step_matches_dense(heads, kv_heads, decode):
    torch.manual_seed(0)
    D, bs, layers, layer = 8, 4, 3, 1
    cache = torch.randn(64, layers, 2, bs, kv_heads, D)
    # per sequence: (total context after this step, new tokens this step)
    plan = [(9, 9), (6, 1), (13, 5), (1, 1), (4, 1), (7, 2), (70, 1), (40, 1)]
    perm = torch.randperm(64).tolist()
    full_k, full_v, slices, qs, ks, vs = [], [], [], [], [], []
    for i, (ctx, new) in enumerate(plan):
        nb = -(-ctx // bs)
        blocks, perm = perm[:nb], perm[nb:]
        kk, vv = torch.randn(ctx, kv_heads, D), torch.randn(ctx, kv_heads, D)
        for p in range(ctx - new):  # the cached context
            cache[blocks[p // bs], layer, 0, p % bs] = kk[p]
            cache[blocks[p // bs], layer, 1, p % bs] = vv[p]
        slices.append(SeqSlice(blocks, ctx - new, new))
        full_k.append(kk), full_v.append(vv)
        qs.append(torch.randn(new, heads, D)), ks.append(kk[ctx - new:]), vs.append(vv[ctx - new:])
    batch = AttentionBatch.build(slices, bs, "cpu")
    assert len(batch.decodes) == 3 and len(batch.prefills) == 3
    before = cache.clone()
    out = paged_attention(torch.cat(qs), torch.cat(ks), torch.cat(vs), cache, layer, batch,
                          D ** -0.5, _workspace(decode))
    row = 0
    for i, (ctx, new) in enumerate(plan):
        ref = dense_reference(qs[i], full_k[i], full_v[i], D ** -0.5)
        torch.testing.assert_close(out[row:row + new].double(), ref, atol=1e-5, rtol=1e-5)
        row += new
    # every new token landed at its slot, and nothing else in the cache changed
    changed = cache != before
    for i, (ctx, new) in enumerate(plan):
        for p in range(ctx - new, ctx):
            blk, off = slices[i].block_ids[p // bs], p % bs
            assert torch.equal(cache[blk, layer, 0, off], full_k[i][p])
            assert torch.equal(cache[blk, layer, 1, off], full_v[i][p])
            changed[blk, layer, :, off] = False
    assert not changed.any()


def test_bfloat16_runs_and_is_close():
    torch.manual_seed(1)
    D, bs = 16, 4
    cache = torch.zeros(8, 1, 2, bs, 2, D, dtype=torch.bfloat16)
    q, k, v = torch.randn(5, 4, D), torch.randn(5, 2, D), torch.randn(5, 2, D)
    batch = AttentionBatch.build([SeqSlice([3, 6], 0, 5)], bs, "cpu")
    out = paged_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), cache, 0, batch, D ** -0.5,
                          AttentionWorkspace())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), dense_reference(q, k, v, D ** -0.5), atol=3e-2, rtol=3e-2)


class _CountingPrefill:
    """The AMX prefill kernel, counting the chunks it attends."""

    def __init__(self, kernel) -> None:
        self.kernel, self.calls = kernel, 0

    def supports(self, q, kv_cache):
        return self.kernel.supports(q, kv_cache)

    def scratch_numel(self, kv_cache, ctx):
        return self.kernel.scratch_numel(kv_cache, ctx)

    def __call__(self, *args):
        self.calls += 1
        return self.kernel(*args)


def test_bfloat16_mixed_step_with_the_native_kernels():
    from tandem.kernels.paged_prefill import PagedPrefillKernel
    prefill = PagedPrefillKernel.load()
    if prefill is None:
        pytest.skip("this CPU has neither AMX tiles nor AVX-512 BF16")
    counting = _CountingPrefill(prefill)
    ws = AttentionWorkspace(PagedDecodeKernel.load(), counting)
    torch.manual_seed(2)
    heads, kv_heads, D, bs, layer = 8, 2, 64, 16, 0
    plan = [(40, 40), (300, 1), (150, 70), (33, 1), (600, 16)]   # (context after the step, new)
    cache = torch.zeros(120, 1, 2, bs, kv_heads, D, dtype=torch.bfloat16)
    perm = torch.randperm(120).tolist()
    slices, qs, ks, vs, full = [], [], [], [], []
    for ctx, new in plan:
        nb = -(-ctx // bs)
        blocks, perm = perm[:nb], perm[nb:]
        kk, vv = torch.randn(ctx, kv_heads, D).bfloat16(), torch.randn(ctx, kv_heads, D).bfloat16()
        for p in range(ctx - new):
            cache[blocks[p // bs], layer, 0, p % bs] = kk[p]
            cache[blocks[p // bs], layer, 1, p % bs] = vv[p]
        slices.append(SeqSlice(blocks, ctx - new, new))
        qs.append(torch.randn(new, heads, D).bfloat16()), ks.append(kk[ctx - new:]), vs.append(vv[ctx - new:])
        full.append((kk.float(), vv.float()))
    batch = AttentionBatch.build(slices, bs, "cpu")
    out = paged_attention(torch.cat(qs), torch.cat(ks), torch.cat(vs), cache, layer, batch, D ** -0.5, ws)
    assert counting.calls == 3                                   # every prefill chunk, no decode
    row = 0
    for q, (k, v) in zip(qs, full):
        ref = dense_reference(q.float(), k, v, D ** -0.5)
        torch.testing.assert_close(out[row:row + len(q)].double(), ref, atol=2e-2, rtol=2e-2)
        row += len(q)
