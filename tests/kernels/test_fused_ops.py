"""The fused element-wise kernels equal the torch chains they replace (bitwise in bfloat16 but
for the sum of squares' order, to float32 rounding in float32), row by row whatever the batch,
with the vector and the portable builds alike."""

from __future__ import annotations

import platform

import pytest
import torch
import torch.nn.functional as F

from tandem.kernels.build import DEFAULT_FLAGS, KernelBuildConfig
from tandem.kernels.fused_ops import FusedOps
from tandem.layers.rotary import apply_rotary

DTYPES = (torch.float32, torch.bfloat16)
PORTABLE_FLAGS = tuple(f for f in DEFAULT_FLAGS if f != "-march=native") + ("-march=x86-64-v2",)


@pytest.fixture(scope="module")
def ops() -> FusedOps:
    return FusedOps.load()


@pytest.fixture(scope="module")
def portable_ops(tmp_path_factory) -> FusedOps:
    if "x86" not in platform.machine().replace("_", ""):
        pytest.skip("x86-64 build flags")
    return FusedOps.load(KernelBuildConfig(cache_dir=tmp_path_factory.mktemp("kernels"), flags=PORTABLE_FLAGS))


def torch_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def assert_near(got: torch.Tensor, want: torch.Tensor) -> None:
    """float32: a few ulps; bfloat16: at most two bf16 steps, and in few elements."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=4e-6, atol=1e-6)
    else:
        g, w = got.float(), want.float()
        # two bf16 steps (8 significant bits) at the larger magnitude: the reference rounds twice
        # (the normalized value, then its product with the weight), the kernel once
        step = torch.exp2(torch.floor(torch.log2(torch.maximum(g.abs(), w.abs()).clamp_min(1e-30))) - 7)
        assert bool(((g - w).abs() <= 2 * step + 1e-6).all()), (g - w).abs().max()
        assert (got != want).float().mean().item() < 0.01


def _rand(*shape, dtype, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,dim", [(1, 768), (37, 72), (300, 100), (4, 2048)])
def test_rms_norm_with_and_without_the_residual_add(ops, dtype, rows, dim):
    x, res, w = _rand(rows, dim, dtype=dtype), _rand(rows, dim, dtype=dtype, seed=1), _rand(dim, dtype=dtype, seed=2)
    assert_near(ops.rms_norm(x, w, 1e-6), torch_rms_norm(x, w, 1e-6))
    total = res + x
    out = ops.rms_norm(x, w, 1e-5, residual=res)
    assert torch.equal(res, total)   # the sum, rounded to the dtype, replaces the residual
    assert_near(out, torch_rms_norm(total, w, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_over_heads_of_a_strided_view(ops, dtype):
    # Qwen3's q/k norm: rows are heads; here a view whose tokens are strided (every other token)
    x = _rand(10, 8, 64, dtype=dtype)[::2]
    w = _rand(64, dtype=dtype, seed=3)
    assert_near(ops.rms_norm(x, w, 1e-6), torch_rms_norm(x, w, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n", [(1, 2048), (33, 40), (130, 5632)])
def test_silu_mul_of_the_halves_of_one_product(ops, dtype, rows, n):
    gate_up = _rand(rows, 2 * n, dtype=dtype, scale=6.0)
    gate_up[0, :4] = torch.tensor([-120.0, 120.0, 0.0, -0.0])    # exp over- and underflow
    gate, up = gate_up[:, :n], gate_up[:, n:]
    assert_near(ops.silu_mul(gate, up), F.silu(gate) * up)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,heads,D", [(1, 12, 64), (70, 4, 128), (9, 3, 96), (5, 2, 40)])
def test_rotary_in_place_equals_the_torch_form(ops, dtype, tokens, heads, D):
    x = _rand(tokens, heads, D, dtype=dtype)
    pos = torch.arange(tokens) * 37 + 5
    freqs = pos.float()[:, None] * (1.0 / 10000 ** (torch.arange(0, D, 2).float() / D))[None]
    cos, sin = freqs.cos().to(dtype)[:, None], freqs.sin().to(dtype)[:, None]
    want = apply_rotary(x, cos, sin)
    got = x.clone()
    assert ops.rotary_(got, cos, sin) is got
    assert torch.equal(got, want)   # products and sums round as torch's do


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_row_does_not_depend_on_the_batch_or_the_threads(ops, dtype):
    x, w = _rand(3000, 768, dtype=dtype), _rand(768, dtype=dtype, seed=1)
    gate_up = _rand(3000, 512, dtype=dtype, seed=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = [ops.rms_norm(x[i:i + 1], w, 1e-6) for i in (0, 1777, 2999)]
        silu1 = ops.silu_mul(gate_up[:, :256], gate_up[:, 256:])
        torch.set_num_threads(2)
        batched = ops.rms_norm(x, w, 1e-6)
        silu2 = ops.silu_mul(gate_up[:, :256], gate_up[:, 256:])
    finally:
        torch.set_num_threads(threads)
    for i, row in zip((0, 1777, 2999), alone):
        assert torch.equal(batched[i:i + 1], row)
    assert torch.equal(silu2, silu1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_portable_build_agrees_with_the_vector_build(ops, portable_ops, dtype):
    x, res, w = _rand(50, 200, dtype=dtype), _rand(50, 200, dtype=dtype, seed=1), _rand(200, dtype=dtype, seed=2)
    res2 = res.clone()
    assert_near(portable_ops.rms_norm(x, w, 1e-6, residual=res2), ops.rms_norm(x, w, 1e-6, residual=res.clone()))
    assert torch.equal(res2, res + x)
    gate_up = _rand(50, 400, dtype=dtype, seed=3, scale=5.0)
    assert_near(portable_ops.silu_mul(gate_up[:, :200], gate_up[:, 200:]), F.silu(gate_up[:, :200]) * gate_up[:, 200:])
    q = _rand(6, 4, 64, dtype=dtype, seed=4)
    cos, sin = _rand(6, 1, 32, dtype=dtype, seed=5), _rand(6, 1, 32, dtype=dtype, seed=6)
    assert torch.equal(portable_ops.rotary_(q.clone(), cos, sin), apply_rotary(q, cos, sin))


def test_other_layouts_are_read_through_a_copy(ops):
    x, gate_up = torch.randn(64, 8), torch.randn(40, 16)
    assert_near(ops.rms_norm(x.t(), torch.ones(64), 1e-6), torch_rms_norm(x.t(), torch.ones(64), 1e-6))
    gate, up = gate_up[:, :8], gate_up.t().contiguous().t()[:, 8:]   # different row strides
    assert_near(ops.silu_mul(gate, up), F.silu(gate) * up)


def test_shapes_and_layouts_it_cannot_take_are_refused(ops):
    x = torch.randn(8, 64)
    with pytest.raises(ValueError, match="weight"):
        ops.rms_norm(x, torch.ones(32), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        ops.rms_norm(x, torch.ones(64), 1e-6, residual=torch.randn(4, 64))
    with pytest.raises(ValueError, match="shape"):
        ops.silu_mul(torch.randn(8, 32), torch.randn(8, 16))
    with pytest.raises(ValueError, match="heads"):
        ops.rotary_(torch.randn(4, 64, 3).transpose(1, 2), torch.randn(4, 1, 32), torch.randn(4, 1, 32))
    assert not FusedOps.supports(torch.randn(2, 2, dtype=torch.float16))
    assert not FusedOps.supports(torch.randn(2, 2), torch.randn(2, 2, dtype=torch.bfloat16))
