"""The Triton grouped-GEMM MoE equals SparseMoE's loop over experts: softmax and grouped sigmoid
routing, shared experts, weights in float32 or the model's dtype, experts of another rank, and
expert_rows (the all-to-all dispatch's per-row form)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install '.[test]')")

from tandem.kernels.triton.fused_moe import TritonFusedMoE  # noqa: E402
from tandem.layers.moe import SparseMoE  # noqa: E402
from tandem.layers.moe_spec import MoESpec  # noqa: E402
from tests.conftest import TEST_DEVICE  # noqa: E402

MIXTRAL = MoESpec(num_experts=8, top_k=2, expert_intermediate_size=40)
DEEPSEEK = MoESpec(num_experts=8, top_k=3, expert_intermediate_size=24, scoring="sigmoid", num_groups=4,
                   topk_groups=2, scaling=2.5, correction_bias=True, num_shared_experts=1, weights_float32=False)


def _moe(spec: MoESpec, dtype: torch.dtype, hidden: int = 48, local=None) -> SparseMoE:
    g = torch.Generator().manual_seed(5)
    moe = SparseMoE(hidden, spec, local_experts=local)
    for p in moe.parameters():
        p.data = torch.randn(p.shape, generator=g) * 0.2
    moe = moe.to(dtype).to(TEST_DEVICE)
    if moe.gate.e_score_correction_bias is not None:   # kept in float32, as the loader does
        moe.gate.e_score_correction_bias.data = moe.gate.e_score_correction_bias.data.float()
    return moe


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("spec", [MIXTRAL, DEEPSEEK], ids=["softmax", "grouped-sigmoid-shared"])
@pytest.mark.parametrize("tokens", [1, 5, 40])
def test_fused_experts_equal_the_loop(spec, dtype, tol, tokens):
    moe = _moe(spec, dtype)
    x = torch.randn(tokens, 48, generator=torch.Generator().manual_seed(tokens)).to(dtype).to(TEST_DEVICE)
    ref = moe(x)
    moe.use_kernel(TritonFusedMoE())
    torch.testing.assert_close(moe(x).float(), ref.float(), atol=tol, rtol=tol)
    rows = torch.arange(tokens, device=x.device) % spec.num_experts
    fused_rows = moe.expert_rows(x, rows)
    moe.kernel = None   # the loop again, over the same (stacked) weights
    torch.testing.assert_close(fused_rows.float(), moe.expert_rows(x, rows).float(), atol=tol, rtol=tol)


def test_a_rank_with_some_experts_adds_only_theirs():
    moe = _moe(MIXTRAL, torch.float32, local=[1, 4, 6])
    x = torch.randn(9, 48, generator=torch.Generator().manual_seed(1)).to(TEST_DEVICE)
    ref = moe(x)
    moe.use_kernel(TritonFusedMoE())
    assert moe.stack_index.tolist() == [-1, 0, -1, -1, 1, -1, 2, -1]
    torch.testing.assert_close(moe(x), ref, atol=1e-5, rtol=1e-5)


def test_expert_weights_become_views_of_the_stacks():
    moe = _moe(MIXTRAL, torch.float32)
    moe.use_kernel(TritonFusedMoE())
    e3 = moe.experts["3"]
    assert e3.up_proj.weight.data_ptr() == moe.w13[3, 40:].data_ptr()
    assert e3.down_proj.weight.data_ptr() == moe.w2[3].data_ptr()
