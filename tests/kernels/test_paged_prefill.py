"""The native prefill kernel equals dense causal attention over cached context plus new tokens, for
the head sizes, GQA groups, block sizes and chunk positions that models use, with either backend:
AMX tiles (where the CPU has them) and AVX-512 BF16 (the build without AMX, which is what a Zen 4
host compiles natively); a build with neither gets no kernel (callers keep SDPA)."""

from __future__ import annotations

import platform

import pytest
import torch

from tandem.kernels.build import DEFAULT_FLAGS, KernelBuildConfig
from tandem.kernels.paged_prefill import PagedPrefillKernel
from tests.layers.test_attention import dense_reference

BF16 = torch.bfloat16


NO_AMX = ("-mno-amx-tile", "-mno-amx-bf16", "-mno-amx-int8")   # native, less AMX: the vector backend


@pytest.fixture(scope="module", params=["native", "no-amx"])
def kernel(request, tmp_path_factory):
    x86 = "x86" in platform.machine().replace("_", "")
    if request.param == "no-amx" and not x86:
        pytest.skip("x86-64 build flags")
    flags = DEFAULT_FLAGS + (NO_AMX if request.param == "no-amx" else ())
    k = PagedPrefillKernel.load(KernelBuildConfig(cache_dir=tmp_path_factory.mktemp("kernels"), flags=flags))
    if k is None:
        pytest.skip("this CPU has neither AMX tiles nor AVX-512 BF16 (the fallback is tested below)")
    if request.param == "no-amx":
        assert k.backend == "avx512-bf16"
    return k


def _paged(num_computed, num_new, heads, kv_heads, D, bs, layers=3, layer=1, seed=0):
    """A cache holding the context in scattered blocks, every other slot (spare blocks, the
    positions past the context, other layers) NaN; its dense K/V and the chunk's queries."""
    g = torch.Generator().manual_seed(seed)
    ctx = num_computed + num_new
    nb = -(-ctx // bs)
    cache = torch.full((nb + 5, layers, 2, bs, kv_heads, D), float("nan"), dtype=BF16)
    blocks = torch.randperm(nb + 5, generator=g)[:nb]
    kv = torch.randn(2, nb * bs, kv_heads, D, generator=g).to(BF16)
    kv[:, ctx:] = float("nan")
    cache[blocks, layer] = kv.view(2, nb, bs, kv_heads, D).transpose(0, 1)
    q = torch.randn(num_new, heads, D, generator=g).to(BF16)
    return cache, blocks, q, kv[0, :ctx].float(), kv[1, :ctx].float()


def _run(kernel, cache, blocks, q, num_computed, scale, layer=1):
    n = kernel.scratch_numel(cache, num_computed + q.shape[0])
    return kernel(q, cache, layer, blocks, num_computed, scale, torch.empty(n, dtype=BF16),
                  torch.empty(n, dtype=BF16))


@pytest.mark.parametrize("heads,kv_heads,D", [(8, 4, 64), (12, 4, 64), (8, 8, 128), (6, 2, 96),
                                              (9, 3, 32), (16, 2, 256), (4, 1, 64)])
@pytest.mark.parametrize("num_computed,num_new", [(0, 1), (0, 37), (0, 300), (5, 3), (130, 64),
                                                  (1000, 17), (511, 260)])
def test_matches_dense_attention(kernel, heads, kv_heads, D, num_computed, num_new):
    cache, blocks, q, k, v = _paged(num_computed, num_new, heads, kv_heads, D, 16)
    scale = D ** -0.5
    out = _run(kernel, cache, blocks, q, num_computed, scale)
    assert out.dtype == BF16 and out.shape == q.shape
    ref = dense_reference(q.float(), k, v, scale)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("bs", [1, 8, 32, 48])
def test_any_block_size(kernel, bs):
    cache, blocks, q, k, v = _paged(77, 40, 4, 2, 64, bs)
    out = _run(kernel, cache, blocks, q, 77, 0.125)
    torch.testing.assert_close(out.double(), dense_reference(q.float(), k, v, 0.125), atol=2e-2, rtol=2e-2)


def test_threads_do_not_change_the_result(kernel):
    cache, blocks, q, _, _ = _paged(200, 90, 8, 2, 64, 16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _run(kernel, cache, blocks, q, 200, 0.125)
        torch.set_num_threads(2)
        two = _run(kernel, cache, blocks, q, 200, 0.125)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_supports_and_bad_arguments(kernel):
    cache, blocks, q, _, _ = _paged(0, 4, 2, 2, 64, 16)
    assert kernel.supports(q, cache)
    assert not kernel.supports(q.float(), cache.float())
    odd = torch.zeros(2, 1, 2, 16, 2, 80, dtype=BF16)
    assert not kernel.supports(torch.zeros(4, 2, 80, dtype=BF16), odd)
    with pytest.raises(ValueError, match="disagree"):
        _run(kernel, cache, blocks[:0], q, 0, 0.125)             # no block covers the context
    with pytest.raises(ValueError, match="scratch"):
        kernel(q, cache, 1, blocks, 0, 0.125, torch.empty(1, dtype=BF16), torch.empty(1, dtype=BF16))


@pytest.mark.skipif("x86" not in platform.machine().replace("_", ""), reason="x86-64 build flags")
def test_without_avx512_bf16_at_compile_time_there_is_no_kernel(tmp_path):
    flags = tuple(f for f in DEFAULT_FLAGS if f != "-march=native") + ("-march=x86-64-v3",)
    assert PagedPrefillKernel.load(KernelBuildConfig(cache_dir=tmp_path, flags=flags)) is None


@pytest.mark.parametrize("heads,kv_heads,D", [(8, 4, 64), (6, 2, 96), (16, 2, 256)])
@pytest.mark.parametrize("num_computed,num_new", [(0, 37), (130, 64), (511, 260)])
def test_an_fp8_e5m2_cache_gives_the_bits_of_a_bf16_cache_holding_its_values(kernel, heads, kv_heads,
                                                                              D, num_computed, num_new):
    # e5m2 widens to bf16 exactly while packing, so the two caches must agree bit for bit
    cache, blocks, q, k, v = _paged(num_computed, num_new, heads, kv_heads, D, 16)
    fp8 = cache.to(torch.float8_e5m2)
    out = _run(kernel, fp8, blocks, q, num_computed, D ** -0.5)
    assert torch.equal(out, _run(kernel, fp8.to(BF16), blocks, q, num_computed, D ** -0.5))
    ref = dense_reference(q.float(), k.to(torch.float8_e5m2).float(), v.to(torch.float8_e5m2).float(),
                          D ** -0.5)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
