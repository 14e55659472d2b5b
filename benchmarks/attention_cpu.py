"""Micro-benchmark of paged-attention options on the CPU (not a test).

Shapes default to a ~100M-parameter Llama-like model's attention: 12 query heads, 4 KV heads,
head_dim 64, block size 16. Prints the median time per call for each option; the option used by
tandem.layers.attention is marked with *.

  .venv/bin/python benchmarks/attention_cpu.py [--threads 1] [--heads 12] [--kv-heads 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
import torch.nn.functional as F

from tandem.kernels.paged_decode import PagedDecodeKernel
from tandem.kernels.paged_prefill import PagedPrefillKernel
from tandem.layers.attention import AttentionWorkspace, paged_attention
from tandem.layers.attention_batch import AttentionBatch, SeqSlice, _decode_group


def bench(fn, min_time: float = 0.3, max_iters: int = 2000) -> float:
    fn()
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_time and len(times) < max_iters:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6  # microseconds


def make_batch(ctxs, news, bs, num_blocks):
    perm = torch.randperm(num_blocks).tolist()
    slices = []
    for ctx, new in zip(ctxs, news):
        nb = -(-ctx // bs)
        slices.append(SeqSlice(perm[:nb], ctx - new, new))
        perm = perm[nb:]
    return AttentionBatch.build(slices, bs, "cpu"), slices


def decode_options(cache, layer, batch, q, scale):
    """q [B, H, D] -> each option returns [B, H, D]."""
    g = batch.decodes[0]
    B, H, D = q.shape
    kvh, bs = cache.shape[4], cache.shape[3]
    nb = g.block_table.shape[1]

    ws = AttentionWorkspace()
    flat = g.block_table.flatten()

    def gathered():  # into reused workspace buffers, as production does
        k, v = ws.kv_views((B * nb, bs, kvh, D), cache)
        torch.index_select(cache[:, layer, 0], 0, flat, out=k)
        torch.index_select(cache[:, layer, 1], 0, flat, out=v)
        return (k.view(B, nb * bs, kvh, D)[:, :g.max_ctx].transpose(1, 2),
                v.view(B, nb * bs, kvh, D)[:, :g.max_ctx].transpose(1, 2))

    def gathered_fresh():  # a new tensor per layer
        k = cache[:, layer, 0][g.block_table].view(B, nb * bs, kvh, D)[:, :g.max_ctx].transpose(1, 2)
        v = cache[:, layer, 1][g.block_table].view(B, nb * bs, kvh, D)[:, :g.max_ctx].transpose(1, 2)
        return k, v

    float_mask = torch.zeros(g.key_mask.shape, dtype=q.dtype).masked_fill(~g.key_mask, float("-inf"))

    def grouped_bool():
        k, v = gathered()
        return F.scaled_dot_product_attention(q.view(B, kvh, H // kvh, D), k, v, attn_mask=g.key_mask,
                                              scale=scale).reshape(B, H, D)

    def grouped_fresh_alloc():
        k, v = gathered_fresh()
        return F.scaled_dot_product_attention(q.view(B, kvh, H // kvh, D), k, v, attn_mask=g.key_mask,
                                              scale=scale).reshape(B, H, D)

    def grouped_float():
        k, v = gathered()
        return F.scaled_dot_product_attention(q.view(B, kvh, H // kvh, D), k, v, attn_mask=float_mask,
                                              scale=scale).reshape(B, H, D)

    def grouped_contig_kv():
        k, v = gathered()
        return F.scaled_dot_product_attention(q.view(B, kvh, H // kvh, D), k.contiguous(), v.contiguous(),
                                              attn_mask=g.key_mask, scale=scale).reshape(B, H, D)

    def enable_gqa():
        k, v = gathered()
        return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=g.key_mask, scale=scale,
                                              enable_gqa=True).reshape(B, H, D)

    def repeat_kv():
        k, v = gathered()
        k, v = k.repeat_interleave(H // kvh, 1), v.repeat_interleave(H // kvh, 1)
        return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=g.key_mask,
                                              scale=scale).reshape(B, H, D)

    def manual_matmul():
        k, v = gathered()
        s = torch.matmul(q.view(B, kvh, H // kvh, D), k.transpose(-1, -2)) * scale  # [B, KVH, G, S]
        s = s.masked_fill(~g.key_mask, float("-inf")).softmax(-1)
        return torch.matmul(s, v).reshape(B, H, D)

    def per_sequence():
        out = torch.empty_like(q)
        for i in range(B):
            ctx = int(g.key_mask[i].sum())
            ids = g.block_table[i, : -(-ctx // bs)]
            k = cache[:, layer, 0][ids].view(-1, kvh, D)[:ctx].transpose(0, 1)
            v = cache[:, layer, 1][ids].view(-1, kvh, D)[:ctx].transpose(0, 1)
            out[i] = F.scaled_dot_product_attention(q[i].view(kvh, H // kvh, D), k, v,
                                                    scale=scale).reshape(H, D)
        return out

    kernel = PagedDecodeKernel.load()

    def native():  # tandem.kernels.paged_decode: blocks read in place
        return kernel(q, cache, layer, g.block_table, g.context_lens, scale)

    return {"native kernel (CPU default) *": native, "grouped query rows, bool mask (SDPA path) *": grouped_bool, "grouped, fresh gather tensors": grouped_fresh_alloc,
            "grouped, float mask": grouped_float,
            "grouped, contiguous K/V": grouped_contig_kv, "enable_gqa": enable_gqa,
            "repeat_interleave K/V": repeat_kv, "manual matmul+softmax": manual_matmul,
            "one SDPA per sequence": per_sequence}


def prefill_options(cache, layer, chunk, q, k_new, v_new, scale, mask):
    """q [n, H, D] of one chunk over cached context, mask [n, ctx] -> [n, H, D]."""
    n, H, D = q.shape
    kvh = cache.shape[4]
    ctx = mask.shape[1]

    ws = AttentionWorkspace()
    nb, bs = chunk.block_ids.shape[0], cache.shape[3]

    def gathered():
        k, v = ws.kv_views((nb, bs, kvh, D), cache)
        torch.index_select(cache[:, layer, 0], 0, chunk.block_ids, out=k)
        torch.index_select(cache[:, layer, 1], 0, chunk.block_ids, out=v)
        return k.view(-1, kvh, D)[:ctx].transpose(0, 1), v.view(-1, kvh, D)[:ctx].transpose(0, 1)

    # 4-D inputs (a batch of one), as tandem.layers.attention: 3-D ones take SDPA's math fallback
    def gqa():
        k, v = gathered()
        return F.scaled_dot_product_attention(q.transpose(0, 1)[None], k[None], v[None], attn_mask=mask,
                                              scale=scale, enable_gqa=True)[0]

    def repeat():
        k, v = gathered()
        return F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.repeat_interleave(H // kvh, 0)[None],
                                              v.repeat_interleave(H // kvh, 0)[None], attn_mask=mask,
                                              scale=scale)[0]

    def grouped_rows():
        k, v = gathered()
        qg = q.view(n, kvh, H // kvh, D).permute(1, 2, 0, 3).reshape(kvh, (H // kvh) * n, D)
        rows_mask = mask.repeat(H // kvh, 1)
        o = F.scaled_dot_product_attention(qg[None], k[None], v[None], attn_mask=rows_mask, scale=scale)[0]
        return o.view(kvh, H // kvh, n, D).reshape(H, n, D)

    def is_causal_local():  # only valid without cached context; timed for comparison
        return F.scaled_dot_product_attention(q.transpose(0, 1)[None], k_new.transpose(0, 1)[None],
                                              v_new.transpose(0, 1)[None], is_causal=True, scale=scale,
                                              enable_gqa=True)[0]

    opts = {"gather + enable_gqa + mask *": gqa, "gather + repeat_interleave": repeat,
            "gather + grouped query rows": grouped_rows, "(no context) causal on local K/V *": is_causal_local}
    native = PagedPrefillKernel.load()
    if native is not None and native.supports(q, cache):   # then the default instead of the SDPA paths
        k_scratch, v_scratch = (torch.empty(native.scratch_numel(cache, ctx), dtype=q.dtype) for _ in range(2))
        opts[f"native kernel, {native.backend} (bfloat16 default) *"] = lambda: native(  # noqa: E731
            q, cache, layer, chunk.block_ids, ctx - n, scale, k_scratch, v_scratch).transpose(0, 1)
    return opts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--dtype", default="float32")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    H, KVH, D, bs, L = args.heads, args.kv_heads, args.head_dim, args.block_size, 2
    scale = D ** -0.5
    print(f"threads={args.threads} H={H} KVH={KVH} D={D} block={bs} dtype={args.dtype}  (median us per call)")

    for B, ctx in [(1, 512), (8, 512), (32, 1024), (32, 256)]:
        ctxs = [max(2, ctx - 37 * i % (ctx // 4)) for i in range(B)]  # one context bucket
        num_blocks = sum(-(-c // bs) for c in ctxs) + 4
        cache = torch.randn(num_blocks, L, 2, bs, KVH, D, dtype=dtype)
        batch, _ = make_batch(ctxs, [1] * B, bs, num_blocks)
        q = torch.randn(B, H, D, dtype=dtype)
        assert len(batch.decodes) == 1
        opts = decode_options(cache, 1, batch, q, scale)
        ref = opts["repeat_interleave K/V"]()
        print(f"\ndecode B={B} ctx<={ctx}")
        tol = 1e-3 if dtype == torch.float32 else 2e-2
        for name, fn in opts.items():
            torch.testing.assert_close(fn(), ref, atol=tol, rtol=tol)
            print(f"  {name:36s} {bench(fn):10.1f}")
        k = torch.randn(B, KVH, D, dtype=dtype)
        for name, ws in (("native", AttentionWorkspace(PagedDecodeKernel.load())),
                         ("SDPA", AttentionWorkspace())):
            full = lambda: paged_attention(q, k, k, cache, 1, batch, scale, ws)  # noqa: E731
            print(f"  {'paged_attention, ' + name + ' (write + attend)':36s} {bench(full):10.1f}")

    # skewed contexts: one long agent context among short ones
    ctxs = [4096] + [128] * 31
    num_blocks = sum(-(-c // bs) for c in ctxs) + 4
    cache = torch.randn(num_blocks, L, 2, bs, KVH, D, dtype=dtype)
    batch, slices = make_batch(ctxs, [1] * len(ctxs), bs, num_blocks)
    q = torch.randn(len(ctxs), H, D, dtype=dtype)
    k = torch.randn(len(ctxs), KVH, D, dtype=dtype)
    one_group = dataclasses.replace(batch, decodes=(_decode_group(slices, list(range(len(ctxs))), bs, "cpu"),))
    ws = AttentionWorkspace()
    native = AttentionWorkspace(PagedDecodeKernel.load())
    print(f"\ndecode B=32, one context of 4096 and 31 of 128")
    for name, b, w in [(f"native kernel, bucketed ({len(batch.decodes)} groups) *", batch, native),
                       ("native kernel, one group", one_group, native),
                       (f"SDPA, bucketed ({len(batch.decodes)} groups) *", batch, ws),
                       ("SDPA, one padded group", one_group, ws)]:
        print(f"  {name:36s} {bench(lambda: paged_attention(q, k, k, cache, 1, b, scale, w)):10.1f}")
    per_seq = decode_options(cache, 1, one_group, q, scale)["one SDPA per sequence"]
    print(f"  {'one SDPA per sequence':36s} {bench(per_seq):10.1f}")

    for n, cached in [(128, 0), (512, 0), (128, 1024), (512, 512), (512, 2560)]:
        ctx = cached + n
        num_blocks = -(-ctx // bs) + 4
        cache = torch.randn(num_blocks, L, 2, bs, KVH, D, dtype=dtype)
        batch, _ = make_batch([ctx], [n], bs, num_blocks)
        chunk = batch.prefills[0]
        q = torch.randn(n, H, D, dtype=dtype)
        kn, vn = torch.randn(n, KVH, D, dtype=dtype), torch.randn(n, KVH, D, dtype=dtype)
        print(f"\nprefill chunk n={n} cached={cached}")
        # without cached context the production SDPA path needs no gather; compare with a full mask
        mask = chunk.mask if chunk.mask is not None else torch.ones(n, n, dtype=torch.bool).tril()
        opts = prefill_options(cache, 1, chunk, q, kn, vn, scale, mask)
        if chunk.mask is not None:
            opts.pop("(no context) causal on local K/V *")
        ref = opts["gather + repeat_interleave"]()
        tol = 1e-3 if dtype == torch.float32 else 2e-2
        for name, fn in opts.items():
            if "no context" not in name:
                torch.testing.assert_close(fn(), ref, atol=tol, rtol=tol)
            print(f"  {name:36s} {bench(fn):10.1f}")

    T = 256
    cache = torch.randn(64, L, 2, bs, KVH, D, dtype=dtype)
    batch, _ = make_batch([T], [T], bs, 64)
    k, v = torch.randn(T, KVH, D, dtype=dtype), torch.randn(T, KVH, D, dtype=dtype)
    kv = torch.stack([k, v], 1)

    def two_puts():
        cache[batch.slot_block_ids, 1, 0, batch.slot_offsets] = k
        cache[batch.slot_block_ids, 1, 1, batch.slot_offsets] = v

    def one_put_stacked():
        cache[batch.slot_block_ids, 1, :, batch.slot_offsets] = torch.stack([k, v], 1)

    def one_put_prestacked():
        cache[batch.slot_block_ids, 1, :, batch.slot_offsets] = kv

    print(f"\nKV write, {T} tokens")
    for name, fn in {"two index_put (K, V) *": two_puts, "stack + one index_put": one_put_stacked,
                     "one index_put (pre-stacked)": one_put_prestacked}.items():
        print(f"  {name:36s} {bench(fn):10.1f}")


if __name__ == "__main__":
    main()
