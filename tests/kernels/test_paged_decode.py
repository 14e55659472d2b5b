"""The native paged decode kernel equals dense attention, in both code paths (AVX-512 where the
machine has it, portable C everywhere), for the head sizes, GQA groups and context lengths that
models use."""

from __future__ import annotations

import pytest
import torch

from tandem.kernels.build import DEFAULT_FLAGS, KernelBuildConfig
from tandem.kernels.paged_decode import PagedDecodeKernel
from tests.layers.test_attention import dense_reference

PORTABLE_FLAGS = tuple(f for f in DEFAULT_FLAGS if f != "-march=native") + ("-march=x86-64",)


@pytest.fixture(scope="module", params=["native", "portable"])
def kernel(request, tmp_path_factory):
    if request.param == "native":
        return PagedDecodeKernel.load()
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT" or "x86" not in _machine():
        pytest.skip("the portable build flags name an x86-64 target")
    cfg = KernelBuildConfig(cache_dir=tmp_path_factory.mktemp("kernels"), flags=PORTABLE_FLAGS)
    return PagedDecodeKernel.load(cfg)


def _machine() -> str:
    import platform
    return platform.machine().replace("_", "")


def _paged(ctxs, heads, kv_heads, D, bs, dtype, layers=2, layer=1, seed=0, kv_dtype=None):
    """A cache (of kv_dtype, default dtype) holding each sequence's context in scattered blocks,
    and its dense K/V (float32)."""
    g = torch.Generator().manual_seed(seed)
    nbs = [-(-c // bs) for c in ctxs]
    cache = torch.randn(sum(nbs) + 3, layers, 2, bs, kv_heads, D, generator=g).to(kv_dtype or dtype)
    perm = torch.randperm(cache.shape[0], generator=g).tolist()
    table = torch.zeros(len(ctxs), max(nbs), dtype=torch.long)   # padding entries point at block 0
    for i, nb in enumerate(nbs):
        blocks, perm = perm[:nb], perm[nb:]
        table[i, :nb] = torch.tensor(blocks)
    q = torch.randn(len(ctxs), heads, D, generator=g).to(dtype)
    return cache, table, torch.tensor(ctxs), q, _dense(cache, table, ctxs, layer)


def _dense(cache, table, ctxs, layer):
    """Each sequence's (K, V) [ctx, kv_heads, D] in float32, read through its block table."""
    bs, kv_heads, D = cache.shape[3:]
    dense = []
    for i, c in enumerate(ctxs):
        nb = -(-c // bs)
        kv = cache[table[i, :nb], layer].transpose(0, 1).reshape(2, nb * bs, kv_heads, D)[:, :c]
        dense.append((kv[0].float(), kv[1].float()))
    return dense


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("heads,kv_heads,D,block_size", [
    (12, 4, 64, 16), (8, 8, 128, 16), (6, 2, 96, 16), (4, 1, 80, 16), (2, 2, 8, 16),
    (16, 2, 128, 5), (8, 1, 64, 48), (9, 3, 256, 16), (4, 4, 32, 1)])
@pytest.mark.parametrize("kv_dtype", [None, torch.float8_e5m2])
def test_matches_dense_attention(kernel, dtype, tol, heads, kv_heads, D, block_size, kv_dtype):
    # block sizes 1 to 48 (a context's last block partly filled), GQA groups 1 to 8, head sizes
    # 8 to 256 (vector and portable paths); the cache in q's dtype or in e5m2, which the kernel
    # widens exactly: the reference is dense attention over the stored values
    ctxs = [1, 15, 16, 17, 300, 33]
    cache, table, lens, q, dense = _paged(ctxs, heads, kv_heads, D, block_size, dtype, kv_dtype=kv_dtype)
    scale = D ** -0.5
    out = kernel(q, cache, 1, table, lens, scale)
    assert out.dtype == dtype and out.shape == q.shape
    for i, (k, v) in enumerate(dense):
        ref = dense_reference(q[i:i + 1].float(), k, v, scale)[0]
        torch.testing.assert_close(out[i].double(), ref, atol=tol, rtol=tol)


def test_widens_every_finite_e5m2_value_exactly(kernel):
    # one position: the output is V itself; V holds each finite e5m2 bit pattern once (zeros,
    # subnormals, normals, both signs; inf and NaN, 8 patterns, replaced by 0)
    bits = torch.arange(256, dtype=torch.uint8)
    values = bits.view(torch.float8_e5m2).float()
    values[~torch.isfinite(values)] = 0.0
    cache = torch.zeros(1, 1, 2, 16, 1, 256, dtype=torch.float8_e5m2)
    cache[0, 0, 1, 0, 0] = values.to(torch.float8_e5m2)
    q = torch.randn(1, 1, 256)
    out = kernel(q, cache, 0, torch.zeros(1, 1, dtype=torch.long), torch.tensor([1]), 0.0625)
    assert torch.equal(out[0, 0], values)


def test_reads_only_the_context(kernel):
    """Other layers, unused blocks (padding entries point at one), and the positions past each
    context in its last block may hold anything, NaN included."""
    ctxs, bs = [20, 5], 16
    cache, table, lens, q, _ = _paged(ctxs, 4, 2, 64, bs, torch.float32)
    used = {int(b) for i, c in enumerate(ctxs) for b in table[i, :-(-c // bs)]}
    unused = [b for b in range(cache.shape[0]) if b not in used]
    table[1, 1:] = unused[0]
    out = kernel(q, cache, 1, table, lens, 0.125)
    poisoned = cache.clone()
    poisoned[:, 0] = float("nan")
    poisoned[unused] = float("nan")
    for i, c in enumerate(ctxs):
        poisoned[table[i, (c - 1) // bs], 1, :, (c - 1) % bs + 1:] = float("nan")
    torch.testing.assert_close(kernel(q, poisoned, 1, table, lens, 0.125), out, rtol=0, atol=0)
    poisoned[table[0, 1], 1, 0, (20 - 1) % bs] = float("nan")  # the last position of row 0 is read
    assert torch.isnan(kernel(q, poisoned, 1, table, lens, 0.125)[0]).all()


def test_rejects_what_it_cannot_compute():
    kernel = PagedDecodeKernel.load()
    cache, table, lens, q, _ = _paged([4], 4, 2, 64, 16, torch.float32)
    assert not kernel.supports(q.half(), cache.half())
    with pytest.raises(ValueError, match="unsupported"):
        kernel(q.half(), cache.half(), 1, table, lens, 0.125)
    with pytest.raises(ValueError, match="int64"):
        kernel(q, cache, 1, table.int(), lens, 0.125)
    with pytest.raises(ValueError, match="disagree"):
        kernel(q[:, :3], cache, 1, table, lens, 0.125)


def test_uses_the_callers_threads(kernel):
    cache, table, lens, q, _ = _paged([50] * 8, 4, 2, 64, 16, torch.float32)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel(q, cache, 1, table, lens, 0.125)
        torch.set_num_threads(2)
        two = kernel(q, cache, 1, table, lens, 0.125)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)  # each sequence is computed by one thread: same order, same bits
