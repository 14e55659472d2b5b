"""The Triton paged attention kernels equal the torch SDPA path of paged_attention on mixed steps
(decodes in several context buckets, prefills with and without cached context), over GQA groups,
head sizes that are not powers of two, block sizes below and above a key tile, and an 8-bit cache."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install '.[test]')")

from tandem.kernels.triton.paged_attention import TritonPagedDecode, TritonPagedPrefill  # noqa: E402
from tandem.layers.attention import AttentionWorkspace, paged_attention  # noqa: E402
from tandem.layers.attention_batch import AttentionBatch, SeqSlice  # noqa: E402
from tests.conftest import TEST_DEVICE  # noqa: E402

# per sequence: (context after this step, new tokens this step)
PLAN = [(9, 9), (6, 1), (13, 5), (1, 1), (40, 1), (7, 2), (70, 1)]


def _step(heads, kv_heads, D, bs, dtype, cache_dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(64, 2, 2, bs, kv_heads, D, generator=g).to(cache_dtype)
    perm = torch.randperm(64, generator=g).tolist()
    slices, n = [], 0
    for ctx, new in PLAN:
        nb = -(-ctx // bs)
        blocks, perm = perm[:nb], perm[nb:]
        slices.append(SeqSlice(blocks, ctx - new, new))
        n += new
    q, k, v = (torch.randn(n, h, D, generator=g).to(dtype) for h in (heads, kv_heads, kv_heads))
    return cache, slices, q, k, v


@pytest.mark.parametrize("dtype,cache_dtype,tol", [
    (torch.float32, torch.float32, 1e-5), (torch.bfloat16, torch.bfloat16, 2e-2),
    (torch.float32, torch.float8_e5m2, 1e-5)])
@pytest.mark.parametrize("heads,kv_heads,D,bs", [(6, 2, 24, 4), (4, 4, 16, 16), (8, 1, 32, 48)])
def test_mixed_step_equals_the_sdpa_path(heads, kv_heads, D, bs, dtype, cache_dtype, tol):
    cache, slices, q, k, v = _step(heads, kv_heads, D, bs, dtype, cache_dtype)
    cache, q, k, v = (t.to(TEST_DEVICE) for t in (cache, q, k, v))
    batch = AttentionBatch.build(slices, bs, TEST_DEVICE)
    assert batch.decodes and any(c.num_computed for c in batch.prefills)
    ref_cache, cache2 = cache.clone(), cache.clone()
    ref = paged_attention(q, k, v, ref_cache, 1, batch, D ** -0.5, AttentionWorkspace())
    ws = AttentionWorkspace(TritonPagedDecode(), TritonPagedPrefill())
    out = paged_attention(q, k, v, cache2, 1, batch, D ** -0.5, ws)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)
    assert torch.equal(cache2.view(torch.uint8), ref_cache.view(torch.uint8))   # same writes, nothing else


def test_an_unsupported_call_falls_back_with_one_warning(caplog):
    cache, slices, q, k, v = _step(4, 2, 16, 4, torch.float64, torch.float64)
    batch = AttentionBatch.build(slices, 4, "cpu")
    ws = AttentionWorkspace(TritonPagedDecode(), TritonPagedPrefill())
    ref = paged_attention(q, k, v, cache.clone(), 0, batch, 0.25, AttentionWorkspace())
    for _ in range(2):
        out = paged_attention(q, k, v, cache.clone(), 0, batch, 0.25, ws)
        torch.testing.assert_close(out, ref)
    warnings = [r for r in caplog.records if "falling back to torch SDPA" in r.getMessage()]
    assert len(warnings) == 2   # one per kernel object (decode, prefill), not one per call
    assert "torch.float64" in warnings[0].getMessage()
