"""The Triton MLA kernel (absorbed form, latents read in place) gives mla_paged_attention the same
outputs as its SDPA paths: decode rows in several context buckets and prefill chunks with and
without cached context (a chunk's rows share one block table, stride 0)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install '.[test]')")

from tandem.kernels.triton.paged_mla import TritonMLA  # noqa: E402
from tandem.layers.attention import AttentionWorkspace  # noqa: E402
from tandem.layers.attention_batch import AttentionBatch, SeqSlice  # noqa: E402
from tandem.layers.mla_attention import mla_paged_attention  # noqa: E402
from tests.conftest import TEST_DEVICE  # noqa: E402

PLAN = [(9, 9), (6, 1), (13, 5), (1, 1), (40, 1), (7, 2)]   # (context after the step, new tokens)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("heads,r,dr,bs", [(4, 32, 8, 4), (20, 24, 12, 16)])
def test_mla_kernel_equals_the_sdpa_paths(heads, r, dr, bs, dtype, tol):
    g = torch.Generator().manual_seed(3)
    dn, dv = 8, 16
    cache = torch.randn(64, 2, 1, bs, 1, r + dr, generator=g).to(dtype)
    perm = torch.randperm(64, generator=g).tolist()
    slices, T = [], 0
    for ctx, new in PLAN:
        nb = -(-ctx // bs)
        blocks, perm = perm[:nb], perm[nb:]
        slices.append(SeqSlice(blocks, ctx - new, new))
        T += new
    q_nope, q_rot = torch.randn(T, heads, dn, generator=g), torch.randn(T, heads, dr, generator=g)
    latent = torch.randn(T, r + dr, generator=g)
    w = torch.randn(heads * (dn + dv), r, generator=g) / r ** 0.5
    q_nope, q_rot, latent, w, cache = (t.to(dtype).to(TEST_DEVICE) for t in (q_nope, q_rot, latent, w, cache))
    batch = AttentionBatch.build(slices, bs, TEST_DEVICE)
    ref = mla_paged_attention(q_nope, q_rot, latent, cache.clone(), 1, batch, 0.3, w, dv, AttentionWorkspace())
    ws = AttentionWorkspace(mla_kernel=TritonMLA())
    out = mla_paged_attention(q_nope, q_rot, latent, cache.clone(), 1, batch, 0.3, w, dv, ws)
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)
