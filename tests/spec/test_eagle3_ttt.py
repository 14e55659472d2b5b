"""The training-time test computes what serving computes: step 1 of the dense unroll equals the
head's paged forward over the same rows, and step 2 at the last position equals the row the
proposer drafts after them (its own output fed back, attending to the rows before it)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tandem.kv.layout import KVLayout
from tandem.layers.attention import AttentionWorkspace
from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.spec.eagle3_head import Eagle3Head, init_head
from tandem.spec.eagle3_loader import config_for_target
from tandem.spec.eagle3_ttt import step_losses, unroll


def _setup(make_engine, llama_dir, T=13):
    engine = make_engine(llama_dir, device="cpu")   # the steps below build CPU tensors
    model = engine.loaded.model
    head = init_head(Eagle3Head(config_for_target(model)), seed=5).eval()
    with torch.no_grad():   # a head far from identity, so that attention matters
        for p in head.parameters():
            if p.dim() >= 2:
                p.mul_(20)
    g = torch.Generator().manual_seed(1)
    aux = torch.randn(T, len(head.cfg.aux_layers), model.arch.hidden_size, generator=g)
    ids = torch.randint(0, model.arch.vocab_size, (T,), generator=g)
    emb = F.embedding(ids, model.model.embed_tokens.weight)
    return model, head, aux, emb


@pytest.mark.parametrize("target_kernels", [False, True])
def test_unrolled_steps_match_the_paged_head(make_engine, llama_dir, target_kernels):
    model, head, aux, emb = _setup(make_engine, llama_dir)
    if target_kernels:   # as the proposer runs it: the target's attention kernels and fused norms
        ws = model.workspace
        head.workspace = AttentionWorkspace(ws.decode_kernel, ws.prefill_kernel)
        head.use_fused_ops(model.model.norm.fused)
    T = aux.shape[0]
    with torch.no_grad():
        outs = unroll(head, aux, emb, depth=3)
    c = head.cfg
    layout = KVLayout(model="t", dtype="float32", block_size=4, num_layers=1, num_kv_heads=c.num_kv_heads,
                      head_dim=c.head_dim)
    kv = layout.allocate(8)
    blocks = list(range(8))
    n = T - 2   # rows 0..n-1 from the target's states; then two unrolled rows at n and n+1
    feat = head.fuse(aux[:n])
    batch = AttentionBatch.build([SeqSlice(blocks, 0, n)], 4, "cpu")
    paged = head(feat, emb[:n], torch.arange(n), batch, kv)
    assert torch.allclose(paged, outs[0][:n], atol=1e-4)
    prev = paged[n - 1:n]
    for s, p in ((2, n), (3, n + 1)):
        row = head(prev, emb[p:p + 1], torch.tensor([p]), AttentionBatch.build([SeqSlice(blocks, p, 1)], 4, "cpu"), kv)
        assert torch.allclose(row, outs[s - 1][p:p + 1], atol=1e-4), s
        prev = row
    # and step 2 is not step 1: the unrolled row reads the head's own output
    assert not torch.allclose(outs[1][n], outs[0][n], atol=1e-3)


def test_step_losses_fall_when_trained(make_engine, llama_dir):
    model, head, aux, emb = _setup(make_engine, llama_dir, T=24)
    for p in head.parameters():
        p.requires_grad_(True)
    labels = torch.randint(0, model.arch.vocab_size, (24,), generator=torch.Generator().manual_seed(2))
    weights = torch.ones(24)
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        opt.zero_grad()
        loss, ces, _ = step_losses(head, unroll(head, aux, emb, 2), model.lm_head.weight.detach(), labels, weights)
        loss.backward()
        opt.step()
        first = first if first is not None else ces
    assert all(c < f for c, f in zip(ces, first))
